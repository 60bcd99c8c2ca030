package discovery

import (
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// toProto returns the generated form of a namewire table, through its
// wire form (so the tests, written with the generated types as the
// control plane's side is, also check namewire's encoder); nil for nil.
func toProto(nt *namewire.NameTable) *meshdnsv1.NameTable {
	if nt == nil {
		return nil
	}
	var t meshdnsv1.NameTable
	if err := proto.Unmarshal(nt.Marshal(), &t); err != nil {
		panic("proto decode of a namewire-marshalled table: " + err.Error())
	}
	return &t
}
