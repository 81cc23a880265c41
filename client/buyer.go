package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

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
	if err := c.identify(req, user); err != nil {
		return 0, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Place is a buyer's place in a product's waiting room, as JoinQueue and
// LookQueue answer it. Status is "waiting", "admitted", "passed", "held"
// (every unit reserved; some may come back), "sold_out", "revoked", "lobby" (a draw's place, given at the start) or,
// looked at without a token, "not_joined" (the line's public face: Mode,
// Serving, Difficulty, Challenge, OpensAt). Token is the place to send with the next
// look and the purchase: a look may answer a new one (a drawn place).
type Place struct {
	Status        string    `json:"status"`
	Mode          string    `json:"mode"`
	Position      int64     `json:"position"`
	Serving       int64     `json:"serving"`
	Ahead         int64     `json:"ahead"`
	WaitSeconds   float64   `json:"wait_seconds"` // until the turn, rounded up; 0: not known (paused, held)
	AdmittedUntil time.Time `json:"admitted_until"`
	Unlikely      bool      `json:"unlikely"`
	Difficulty    int       `json:"difficulty"` // the proof of work a join needs, in leading zero bits
	Challenge     string    `json:"challenge"`  // what the work hashes with (waitroom.WorkInput), told once the room opens
	OpensAt       time.Time `json:"opens_at"`
	Token         string    `json:"token"`
	// RetryAfter is when the server asks to be looked at again (its
	// Retry-After, whole seconds); 0 when it named none.
	RetryAfter time.Duration `json:"-"`
}

// JoinQueue joins user to product's waiting room; work is the proof of
// work's nonce when the line asks for one ("": none sent). A second join
// answers the same place. An answer outside 2xx is an *Error (403
// work_required, not_open; 404 no waiting room; 429); any other error means
// no answer was read.
func (c *Client) JoinQueue(ctx context.Context, product, user, work string) (Place, error) {
	var body any
	if work != "" {
		body = api.QueueJoin{Work: work}
	}
	return c.place(ctx, http.MethodPost, product, user, "", body)
}

// LookQueue is user's place in product's waiting room, held as token (""
// answers the line's public face). Errors as JoinQueue's.
func (c *Client) LookQueue(ctx context.Context, product, user, token string) (Place, error) {
	return c.place(ctx, http.MethodGet, product, user, token, nil)
}

func (c *Client) place(ctx context.Context, method, product, user, token string, body any) (Place, error) {
	h := http.Header{}
	if token != "" {
		h.Set(api.QueueTokenHeader, token)
	}
	resp, raw, err := c.buyer(ctx, method, api.Path(api.QueuePath, product), user, h, body)
	if err != nil {
		return Place{}, err
	}
	if resp.StatusCode >= 300 {
		return Place{}, answerError(resp.StatusCode, raw)
	}
	var p Place
	if err := json.Unmarshal(raw, &p); err != nil {
		return Place{}, err
	}
	p.RetryAfter = retryAfter(resp)
	return p, nil
}

// PurchaseAnswer is the server's answer to a purchase: its status, and the
// error code and message of an answer outside 2xx.
type PurchaseAnswer struct {
	Status        int
	Code, Message string
	OrderID       string        // of a 200
	RetryAfter    time.Duration // of a 429, when named
}

// PurchaseInLine buys one unit of product as user, holding token, the
// user's place in the product's waiting room (403 not_admitted before the
// turn, revoked). Whatever the server answers is returned with no error;
// an error means no answer came.
func (c *Client) PurchaseInLine(ctx context.Context, product, user, token string) (PurchaseAnswer, error) {
	resp, raw, err := c.buyer(ctx, http.MethodPost, api.Path(api.PurchasePath, product), user, http.Header{api.QueueTokenHeader: {token}}, nil)
	if err != nil {
		return PurchaseAnswer{}, err
	}
	a := PurchaseAnswer{Status: resp.StatusCode, RetryAfter: retryAfter(resp)}
	if resp.StatusCode >= 300 {
		e := answerError(resp.StatusCode, raw)
		a.Code, a.Message = e.Code, e.Message
		return a, nil
	}
	var ok struct {
		OrderID string `json:"order_id"`
	}
	json.Unmarshal(raw, &ok) // a 202 (a ticket) has none
	a.OrderID = ok.OrderID
	return a, nil
}

// PayOrder sends user's payment result for order id, unsigned, as the sale
// page's Pay button does: a server without a payment secret (development)
// takes it; one with a secret answers 401.
func (c *Client) PayOrder(ctx context.Context, id, user string, success bool) error {
	result := "fail"
	if success {
		result = "success"
	}
	resp, raw, err := c.buyer(ctx, http.MethodPost, api.Path(api.PayPath, id), user, nil, map[string]string{"result": result})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return answerError(resp.StatusCode, raw)
	}
	return nil
}

// buyer sends a buyer API request as user (api.UserIDHeader) with header
// and an optional JSON body, and reads the answer's body.
// identify says who the buyer is: its signed token with BuyerToken set,
// else X-User-ID.
func (c *Client) identify(req *http.Request, user string) error {
	if c.BuyerToken == nil {
		req.Header.Set(api.UserIDHeader, user)
		return nil
	}
	tok, err := c.BuyerToken(user)
	if err != nil {
		return fmt.Errorf("buyer %s's token: %w", user, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}

func (c *Client) buyer(ctx context.Context, method, path, user string, header http.Header, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if err := c.identify(req, user); err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, err
	}
	return resp, raw, nil
}

// retryAfter is the answer's Retry-After in seconds (0: none, or a date).
func retryAfter(resp *http.Response) time.Duration {
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
