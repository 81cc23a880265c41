package client

import (
	"context"
	"io"
	"net/http"

	"github.com/shardstock/shardstock/api"
)

// Purchase buys one unit of product as user (the server must trust
// api.UserIDHeader) and returns the answer's status, whatever it is; an
// error means no answer came. The body is read and dropped, so the
// connection is kept for the next call.
func (c *Client) Purchase(ctx context.Context, product, user string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+api.Path(api.PurchasePath, product), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(api.UserIDHeader, user)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
