package api

import (
	"errors"
	"testing"

	"github.com/shardstock/shardstock"
)

type sample struct {
	Stock  int64        `json:"stock"`
	Title  string       `json:"title"`
	Starts OptionalTime `json:"starts_at"`
}

func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		body string
		ok   bool
	}{
		{`{"stock":1}`, true},
		{`{"stock":1,"starts_at":"2026-01-01T00:00:00Z"}`, true},
		{`{"stock":1,"starts_at":null}`, true},
		{`{"stock":1} `, true},
		{`{"stock":1,"extra":2}`, false},
		{`{"stock":1}{"stock":2}`, false},
		{`{"stock":"1"}`, false},
		{`{"stock":1,"starts_at":"tomorrow"}`, false},
		{`[1]`, false},
		{`{`, false},
	}
	for _, tc := range cases {
		var s sample
		err := decodeStrict([]byte(tc.body), &s)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, shardstock.ErrInvalid) {
			t.Errorf("%s: %v, want ok=%v", tc.body, err, tc.ok)
		}
	}
}

// FuzzDecodeStrict: any body is decoded or refused with ErrInvalid (a 400),
// never a panic or another error (which would be a 500).
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{"stock":1}`, `{"stock":1,"title":"x","starts_at":"2026-01-01T00:00:00Z"}`, `{}`, `{"a":`, `[]`, `null`, `{"stock":1e999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var s sample
		if err := decodeStrict(body, &s); err != nil && !errors.Is(err, shardstock.ErrInvalid) {
			t.Fatalf("%q: %v", body, err)
		}
	})
}
