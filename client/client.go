// Package client calls a shardstock server over HTTP: the admin API for
// "shardstock admin" and the buyer API (purchase, waiting room) for
// "shardstock loadgen". Its paths and request bodies are package api's,
// the ones the server mounts and decodes. It imports only api.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/shardstock/shardstock/api"
)

// maxAnswer bounds an answer's body.
const maxAnswer = 16 << 20

// Client calls one server. Its admin calls return the server's JSON answer
// as it came; an answer outside 2xx is an *Error, and any other error means
// no answer was read.
type Client struct {
	URL   string // the server's base URL, without a trailing slash
	Token string // the admin token, sent to the admin API as a bearer token
	// BuyerToken, when set, gives a buyer's signed token (a server with
	// SHARDSTOCK_USER_AUTH=hmac, or behind the edge, which passes on no
	// X-User-ID): the buyer calls send it as a bearer token instead of
	// X-User-ID.
	BuyerToken func(user string) (string, error)
	HTTP       *http.Client // nil: http.DefaultClient
}

// Error is the server's answer outside 2xx: its status and the API's error
// body (Code and Message empty when the body is not one).
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// call is one admin API request: method, path under api.AdminBase, an
// optional JSON body and headers.
type call struct {
	method, path string
	body         any
	header       http.Header
}

// admin sends call to the admin API and returns the answer's body.
func (c *Client) admin(ctx context.Context, call call) (json.RawMessage, error) {
	req, err := c.request(ctx, call)
	if err != nil {
		return nil, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, answerError(resp.StatusCode, body)
	}
	return body, nil
}

func (c *Client) request(ctx context.Context, call call) (*http.Request, error) {
	var body []byte
	if call.body != nil {
		var err error
		if body, err = json.Marshal(call.body); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, call.method, c.URL+api.AdminBase+call.path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range call.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

func answerError(status int, body []byte) *Error {
	var b api.ErrorBody
	json.Unmarshal(body, &b) // not the API's error body: status only
	return &Error{Status: status, Code: b.Error, Message: b.Message}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

// shardPath is a path with a shard index.
func shardPath(pattern string, shard int) string {
	return api.Path(pattern, strconv.Itoa(shard))
}
