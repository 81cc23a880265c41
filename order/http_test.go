package order

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
)

// fakePayments records what the handler asked: the signature it checked,
// the callback it checked, the payment it applied.
type fakePayments struct {
	signatureErr, callbackErr error
	checked                   *PaymentCallback
	paid                      *bool
}

func (f *fakePayments) CheckCallbackSignature([]byte, string) error { return f.signatureErr }

func (f *fakePayments) CheckCallback(_ context.Context, _, _ string, cb PaymentCallback) error {
	f.checked = &cb
	return f.callbackErr
}

func (f *fakePayments) Get(context.Context, string, string) (*shardstock.Order, error) {
	return nil, shardstock.ErrNotFound
}

func (f *fakePayments) Pay(_ context.Context, id, _ string, success bool) (*shardstock.Order, error) {
	f.paid = &success
	return &shardstock.Order{ID: id}, nil
}

func (f *fakePayments) Cancel(context.Context, string, string) (*shardstock.Order, error) {
	return nil, shardstock.ErrNotFound
}

// The payment callback checks the signature over the raw body first (a
// forged body is 401 before it is parsed), then what the signed body binds,
// and applies the payment only when both pass.
func TestPostPayChecksBeforeItPays(t *testing.T) {
	refused := errBadCallback("it was signed for another order")
	cases := []struct {
		name                      string
		body                      string
		signatureErr, callbackErr error
		wantCode                  string // "" for 202
		wantChecked, wantPaid     bool
	}{
		{"forged, not even JSON", `not json`, shardstock.ErrUnauthorized, nil, "unauthorized", false, false},
		{"signed, not a result", `{"result":"maybe"}`, nil, nil, "bad_request", false, false},
		{"signed, binds another order", `{"result":"success","order_id":"o2"}`, nil, refused, "unauthorized", true, false},
		{"signed, binds this order", `{"result":"success","order_id":"o1"}`, nil, nil, "", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePayments{signatureErr: tc.signatureErr, callbackErr: tc.callbackErr}
			h := Handlers{Orders: f, Callbacks: f, Identity: func(*http.Request) (string, error) { return "alice", nil }}
			req := httptest.NewRequest(http.MethodPost, "/api/v1/orders/o1/pay", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			c := echo.New().NewContext(req, rec)
			c.SetParamNames("id")
			c.SetParamValues("o1")
			err := h.PostPay(c)
			var e *shardstock.Error
			switch {
			case tc.wantCode == "" && (err != nil || rec.Code != http.StatusAccepted):
				t.Fatalf("answered %d, %v; want 202", rec.Code, err)
			case tc.wantCode != "" && (!errors.As(err, &e) || e.Code != tc.wantCode):
				t.Fatalf("error %v, want %s", err, tc.wantCode)
			}
			if (f.checked != nil) != tc.wantChecked || (f.paid != nil) != tc.wantPaid {
				t.Fatalf("callback checked %v, paid %v; want %v, %v", f.checked != nil, f.paid != nil, tc.wantChecked, tc.wantPaid)
			}
		})
	}
}
