module github.com/meshdns/meshdns

go 1.26.0

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/miekg/dns v1.1.73 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/api v0.32.13 // indirect
	k8s.io/apimachinery v0.32.13 // indirect
	k8s.io/client-go v0.32.13 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
