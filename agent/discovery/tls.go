package discovery

import (
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// transportCredentials builds the credentials for one connection from the
// certificate files as they are now.
func (c *Client) transportCredentials() (credentials.TransportCredentials, error) {
	if c.tls == nil {
		return insecure.NewCredentials(), nil
	}
	conf, err := c.tls.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("control plane tls: %w", err)
	}
	return credentials.NewTLS(conf), nil
}
