package flashsale

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestReservedEncodesLikeEncodingJSON(t *testing.T) {
	for _, r := range []Reserved{
		{Status: "reserved", OrderID: NewOrderID(), Shard: 0},
		{Status: "reserved", OrderID: "a-b_C9", Shard: 63},
	} {
		want, _ := json.Marshal(r)
		if got := r.encode(); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("encode %+v = %s, want %s", r, got, want)
		}
	}
}
