// Package selfcert manages the control plane's webhook serving certificate
// with no manual step: at start-up it takes the CA and the serving
// certificate from a Secret, creating both when the Secret does not exist;
// it renews the serving certificate (and, near its end, the CA) well before
// expiry, and keeps the caBundle of the MutatingWebhookConfiguration equal to
// the CA, so the API server trusts whatever certificate the webhook serves.
// Replicas share the Secret: the first to create or renew it wins
// (optimistic concurrency), the others pick its result up.
package selfcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of the Secret.
const (
	keyCACert   = "ca.crt"
	keyCAKey    = "ca.key"
	keyPrevCA   = "ca-previous.crt" // the CA before the last CA rotation, still trusted
	keyCert     = "tls.crt"
	keyKey      = "tls.key"
	defaultName = "meshdns-webhook-certs"
	// backdate is how far before its issue a certificate starts, for
	// clock skew between nodes.
	backdate = time.Hour
)

// Config says where the certificates live and what they are for.
type Config struct {
	// API reaches the API server (NewAPI).
	API API
	// Namespace and SecretName of the Secret; SecretName defaults to
	// meshdns-webhook-certs.
	Namespace, SecretName string
	// DNSNames and IPs the serving certificate is for, such as
	// meshdns-controlplane.meshdns-system.svc; at least one.
	DNSNames []string
	IPs      []net.IP
	// WebhookConfigs are the MutatingWebhookConfigurations whose caBundle
	// is kept equal to the CA (one not found yet makes Ensure fail, after
	// serving the certificate, so Run retries in seconds).
	WebhookConfigs []string
	// Validity of the serving certificate (default 90 days) and of the CA
	// (default 10 years). Each is renewed when a third of it is left.
	Validity, CAValidity time.Duration
	// CAOverlap is how long the previous CA stays in the bundle after a
	// CA rotation (default 1 hour): long enough for every replica to serve
	// the new certificate (CheckInterval) and for the kubelet to refresh
	// the bundle in running pods (about a minute), then the retired CA is
	// trusted no more.
	CAOverlap time.Duration
	// CheckInterval is how often the Secret and the webhook configurations
	// are looked at again (default 1 minute).
	CheckInterval time.Duration
	Now           func() time.Time
	Logger        *slog.Logger
	Registerer    prometheus.Registerer
}

// Manager serves the current certificate; see the package comment.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	cert   atomic.Pointer[tls.Certificate]
	bundle atomic.Pointer[[]byte]

	expiry   *prometheus.GaugeVec
	renewals prometheus.Counter
}

// New validates cfg. It does no I/O; Run (or Ensure) does.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.API == nil:
		return nil, errors.New("selfcert: a Kubernetes API client is required")
	case cfg.Namespace == "":
		return nil, errors.New("selfcert: the Secret's namespace is required")
	case len(cfg.DNSNames) == 0 && len(cfg.IPs) == 0:
		return nil, errors.New("selfcert: the certificate needs at least one DNS name or IP")
	}
	if cfg.SecretName == "" {
		cfg.SecretName = defaultName
	}
	if cfg.Validity <= 0 {
		cfg.Validity = 90 * 24 * time.Hour
	}
	if cfg.CAValidity <= 0 {
		cfg.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Minute
	}
	if cfg.CAOverlap <= 0 {
		cfg.CAOverlap = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		cfg: cfg,
		log: cfg.Logger,
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_cert_expiry_timestamp_seconds",
			Help: "When the certificate the control plane serves (cert=webhook) or its CA (cert=ca) expires, in Unix seconds.",
		}, []string{"cert"}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_cert_renewals_total",
			Help: "Certificates this replica created or renewed in the Secret.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{m.expiry, m.renewals} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("selfcert metrics: %w", err)
			}
		}
	}
	return m, nil
}

// GetCertificate is tls.Config.GetCertificate: the current serving
// certificate, or an error before the first Ensure succeeded.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("selfcert: no serving certificate yet")
}

// CABundle returns the PEM CAs clients must trust (nil before Ensure).
func (m *Manager) CABundle() []byte {
	if b := m.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// Run ensures the certificates at once, retrying every few seconds until it
// works, then every CheckInterval, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if err := m.Ensure(ctx); err != nil {
			m.log.Error("webhook certificate", "err", err)
			wait = min(m.cfg.CheckInterval, 5*time.Second)
			continue
		}
		wait = m.cfg.CheckInterval
	}
}

// Ensure brings the Secret, the served certificate and the webhook
// configurations' caBundle up to date once.
func (m *Manager) Ensure(ctx context.Context) error {
	sec, err := m.secret(ctx)
	if err != nil {
		return err
	}
	serving, err := pair{certPEM: sec.Data[keyCert], keyPEM: sec.Data[keyKey]}.tlsCertificate()
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
	}
	ca, _, err := pair{certPEM: sec.Data[keyCACert], keyPEM: sec.Data[keyCAKey]}.parse()
	if err != nil {
		return fmt.Errorf("secret %s/%s: ca: %w", m.cfg.Namespace, m.cfg.SecretName, err)
	}
	bundle := append(append([]byte(nil), sec.Data[keyCACert]...), sec.Data[keyPrevCA]...)
	m.cert.Store(serving)
	m.bundle.Store(&bundle)
	m.expiry.WithLabelValues("webhook").Set(float64(serving.Leaf.NotAfter.Unix()))
	m.expiry.WithLabelValues("ca").Set(float64(ca.NotAfter.Unix()))
	return m.patchWebhooks(ctx, bundle)
}

// secret returns the Secret with a CA and a serving certificate that are
// valid for at least another third of their life, creating or renewing
// them as needed.
func (m *Manager) secret(ctx context.Context) (*corev1.Secret, error) {
	api := m.cfg.API
	for attempt := 0; attempt < 3; attempt++ {
		sec, err := api.GetSecret(ctx, m.cfg.Namespace, m.cfg.SecretName)
		if apierrors.IsNotFound(err) {
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: m.cfg.SecretName, Namespace: m.cfg.Namespace,
					Labels: map[string]string{"app.kubernetes.io/part-of": "meshdns"}},
				Type: corev1.SecretTypeOpaque,
			}
			if err := m.renew(sec); err != nil {
				return nil, err
			}
			created, err := api.CreateSecret(ctx, sec)
			if apierrors.IsAlreadyExists(err) {
				continue // another replica was first: take its certificates
			}
			if err != nil {
				return nil, fmt.Errorf("create secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
			}
			m.renewals.Inc()
			m.log.Info("created the webhook certificate", "secret", m.cfg.SecretName)
			return created, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
		}
		due, retire := m.due(sec), m.overlapOver(sec)
		if !due && !retire {
			return sec, nil
		}
		sec = sec.DeepCopy()
		if retire {
			delete(sec.Data, keyPrevCA)
		}
		if due {
			if err := m.renew(sec); err != nil {
				return nil, err
			}
		}
		updated, err := api.UpdateSecret(ctx, sec)
		if apierrors.IsConflict(err) {
			continue // another replica renewed it meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("update secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
		}
		if due {
			m.renewals.Inc()
			m.log.Info("renewed the webhook certificate", "secret", m.cfg.SecretName)
		} else {
			m.log.Info("retired the previous CA: the rotation's overlap is over", "secret", m.cfg.SecretName)
		}
		return updated, nil
	}
	return nil, fmt.Errorf("secret %s/%s keeps changing under us", m.cfg.Namespace, m.cfg.SecretName)
}

// due reports whether the Secret's certificates need renewing: missing,
// unreadable, not for our names, or with less than a third of their
// validity left.
func (m *Manager) due(sec *corev1.Secret) bool {
	now := m.cfg.Now()
	ca, _, err := pair{certPEM: sec.Data[keyCACert], keyPEM: sec.Data[keyCAKey]}.parse()
	if err != nil || now.Add(m.cfg.CAValidity/3).After(ca.NotAfter) || !permits(ca, m.cfg.DNSNames, m.cfg.IPs) {
		return true
	}
	serving, _, err := pair{certPEM: sec.Data[keyCert], keyPEM: sec.Data[keyKey]}.parse()
	if err != nil || !covers(serving, ca, m.cfg.DNSNames, m.cfg.IPs) {
		return true
	}
	return now.Add(m.cfg.Validity / 3).After(serving.NotAfter)
}

// overlapOver reports whether the Secret keeps a previous CA whose
// overlap with the current one is over (or that no longer parses or has
// expired): it is to leave the bundle. The rotation's time is the current
// CA's start, which is backdated.
func (m *Manager) overlapOver(sec *corev1.Secret) bool {
	prev, ok := sec.Data[keyPrevCA]
	if !ok {
		return false
	}
	now := m.cfg.Now()
	old, _, err := pair{certPEM: prev}.parseCert()
	if err != nil || now.After(old.NotAfter) {
		return true
	}
	ca, _, err := pair{certPEM: sec.Data[keyCACert]}.parseCert()
	if err != nil {
		return false // the CA itself is due; renew decides
	}
	return now.After(ca.NotBefore.Add(backdate + m.cfg.CAOverlap))
}

// renew writes a new serving certificate into sec, and a new CA first when
// the old one is missing or near its end; the old CA stays trusted (in
// ca-previous.crt, part of the caBundle) for Config.CAOverlap, so
// replicas still serving a certificate of the old CA, and clients whose
// bundle is refreshed a little later, keep working.
func (m *Manager) renew(sec *corev1.Secret) error {
	now := m.cfg.Now()
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	ca := pair{certPEM: sec.Data[keyCACert], keyPEM: sec.Data[keyCAKey]}
	old, _, oldErr := ca.parse()
	// A CA whose name constraints leave out a configured name (the names
	// changed) cannot sign for it: it is rotated like one near its end.
	if oldErr != nil || now.Add(m.cfg.CAValidity/3).After(old.NotAfter) || !permits(old, m.cfg.DNSNames, m.cfg.IPs) {
		next, err := newCA("meshdns-controlplane-ca", now, m.cfg.CAValidity, m.cfg.DNSNames, m.cfg.IPs)
		if err != nil {
			return err
		}
		if oldErr == nil && now.Before(old.NotAfter) {
			sec.Data[keyPrevCA] = ca.certPEM
		} else {
			delete(sec.Data, keyPrevCA)
		}
		ca = next
		sec.Data[keyCACert], sec.Data[keyCAKey] = ca.certPEM, ca.keyPEM
	}
	serving, err := newServing(ca, m.cfg.DNSNames, m.cfg.IPs, now, m.cfg.Validity)
	if err != nil {
		return err
	}
	sec.Data[keyCert], sec.Data[keyKey] = serving.certPEM, serving.keyPEM
	return nil
}

// patchWebhooks sets the caBundle of every webhook in the configurations.
func (m *Manager) patchWebhooks(ctx context.Context, bundle []byte) error {
	api := m.cfg.API
	var errs []error
	for _, name := range m.cfg.WebhookConfigs {
		mwc, err := api.GetWebhookConfig(ctx, name)
		if apierrors.IsNotFound(err) {
			// Not installed yet (applied after the control plane
			// started): an error, so Run looks again in seconds.
			errs = append(errs, fmt.Errorf("webhook configuration %s not found; its caBundle is not set", name))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("get webhook configuration %s: %w", name, err))
			continue
		}
		changed := false
		for i := range mwc.Webhooks {
			if !bytes.Equal(mwc.Webhooks[i].ClientConfig.CABundle, bundle) {
				mwc.Webhooks[i].ClientConfig.CABundle = bundle
				changed = true
			}
		}
		if !changed {
			continue
		}
		if _, err := api.UpdateWebhookConfig(ctx, mwc); err != nil {
			errs = append(errs, fmt.Errorf("update caBundle of %s: %w", name, err))
			continue
		}
		m.log.Info("set the caBundle of the webhook configuration", "name", name)
	}
	return errors.Join(errs...)
}
