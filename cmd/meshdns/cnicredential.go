package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshdns/meshdns/cni"
)

// cniCredential keeps the plugin's token. The installer's own projected
// token is bound to its pod and dies with it (deleting the pod makes the
// API server refuse it at once), so the plugin gets a token of its own from
// the TokenRequest API, bound to no object: it outlives the installer's pod
// by up to its lifetime, and the installer renews it in place at half that.
type cniCredential struct {
	server, tokenDir    string
	namespace, account  string
	lifetime            time.Duration // requested; the API server may shorten it
	log                 *slog.Logger
	now                 func() time.Time
	token               string
	renewAt             time.Time
	warnedBound, broken bool
}

// kubeconfig returns the plugin's kubeconfig, renewing the token when it
// is half way through its life or was rejected.
func (c *cniCredential) kubeconfig(ctx context.Context) ([]byte, error) {
	ca, err := os.ReadFile(filepath.Join(c.tokenDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read service account CA: %w", err)
	}
	if c.token == "" || c.broken || !c.now().Before(c.renewAt) {
		if err := c.renew(ctx); err != nil {
			return nil, err
		}
	}
	return pluginKubeconfig(c.server, ca, c.token)
}

// renew gets a new token. Where the TokenRequest API refuses (RBAC of an
// older install), the installer's own token is used, as before, with a
// warning: it stops working when this pod is deleted.
func (c *cniCredential) renew(ctx context.Context) error {
	token, exp, err := c.request(ctx)
	if err == nil {
		c.token, c.broken = token, false
		c.renewAt = c.now().Add(exp.Sub(c.now()) / 2)
		c.log.Info("meshdns-cni credential renewed", "expires", exp.UTC().Format(time.RFC3339))
		return nil
	}
	own, rerr := os.ReadFile(filepath.Join(c.tokenDir, "token"))
	if rerr != nil {
		return errors.Join(err, fmt.Errorf("read service account token: %w", rerr))
	}
	if !c.warnedBound {
		c.log.Warn("cannot get a token for the plugin; it uses this pod's own token, which the API server "+
			"rejects once this pod is deleted (grant create on serviceaccounts/token)", "err", err)
		c.warnedBound = true
	}
	// The projected token file is renewed by the kubelet: read it again on
	// the next round.
	c.token, c.renewAt, c.broken = string(own), time.Time{}, false
	return nil
}

// request asks the TokenRequest API for a token of the installer's
// ServiceAccount bound to no object.
func (c *cniCredential) request(ctx context.Context) (string, time.Time, error) {
	if c.namespace == "" {
		return "", time.Time{}, errors.New("no --namespace (env POD_NAMESPACE) to request the plugin's token in")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	secs := int64(c.lifetime / time.Second)
	req := authenticationv1.TokenRequest{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	var tr authenticationv1.TokenRequest
	path := "/api/v1/namespaces/" + url.PathEscape(c.namespace) + "/serviceaccounts/" + url.PathEscape(c.account) + "/token"
	if _, err := installerCall(ctx, c.server, c.tokenDir, http.MethodPost, path, &req, &tr); err != nil {
		return "", time.Time{}, fmt.Errorf("request a token for serviceaccount %s/%s: %w", c.namespace, c.account, err)
	}
	if tr.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("request a token for serviceaccount %s/%s: empty token", c.namespace, c.account)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// check makes the plugin's own call with the kubeconfig written on the
// node (a pod that does not exist: authenticated and authorized, it is a
// 404) and reports a credential the API server refuses loudly, to be
// renewed on the next round.
func (c *cniCredential) check(ctx context.Context, kubeconfig string) {
	ctx, cancel := context.WithTimeout(ctx, cni.DefaultLookupTimeout)
	defer cancel()
	_, err := podAnnotations(ctx, kubeconfig, "kube-system", "meshdns-cni-credential-check")
	if err == nil {
		return
	}
	if errors.Is(err, cni.ErrCredentialRejected) {
		c.broken = true
		c.log.Error("the API server rejects the plugin's credential: pods outside the excluded namespaces "+
			"cannot start on this node until it is renewed", "err", err)
		return
	}
	c.log.Warn("the plugin's credential could not be checked", "err", err)
}

// installerCall makes one API call with the installer's own projected
// token (re-read from tokenDir, which the kubelet renews): a JSON body in,
// a JSON object out. A plain REST call, not a clientset: the binary does
// not carry the clientset's scheme of every API group. It returns the
// HTTP status; any status but 2xx is an error too.
func installerCall(ctx context.Context, server, tokenDir, method, path string, in, out any) (int, error) {
	cfg := &rest.Config{Host: server, BearerTokenFile: filepath.Join(tokenDir, "token"),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(tokenDir, "ca.crt")}, UserAgent: "meshdns-cni-install"}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(server, "/")+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("decode %s: %w", path, err)
	}
	return resp.StatusCode, nil
}

// pluginKubeconfig is the plugin's kubeconfig: the API server, its CA and
// the token.
func pluginKubeconfig(server string, ca []byte, token string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["meshdns-cni"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["meshdns-cni"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "meshdns-cni"}
	cfg.CurrentContext = "meshdns-cni"
	return clientcmd.Write(*cfg)
}
