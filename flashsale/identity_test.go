package flashsale

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/shardstock/shardstock"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func sign(t testing.TB, method jwt.SigningMethod, key any, claims jwt.Claims) string {
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenIdentity(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	good, _ := MintToken(secret, "alice", time.Hour, now)
	aud := jwt.ClaimStrings{TokenAudience}
	cases := []struct {
		name, header, user string
	}{
		{"valid", "Bearer " + good, "alice"},
		{"expired within the skew", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(-time.Hour), ExpiresAt: at(-10 * time.Second), Issuer: TokenIssuer, Audience: aud}), "bob"},
		{"no issuer", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(time.Hour), Audience: aud}), ""},
		{"no audience", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(time.Hour), Issuer: TokenIssuer}), ""},
		{"another audience", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(time.Hour), Issuer: TokenIssuer, Audience: jwt.ClaimStrings{"billing"}}), ""},
		{"expired", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(-time.Hour), ExpiresAt: at(-time.Minute)}), ""},
		{"issued in the future", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(5 * time.Minute), ExpiresAt: at(time.Hour)}), ""},
		{"no exp", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0)}), ""},
		{"no iat", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", ExpiresAt: at(time.Hour)}), ""},
		{"lives too long", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(48 * time.Hour)}), ""},
		{"wrong key", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(time.Hour)}), ""},
		{"HS512", "Bearer " + sign(t, jwt.SigningMethodHS512, secret, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(time.Hour)}), ""},
		{"alg none", "Bearer " + sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.RegisteredClaims{Subject: "bob", IssuedAt: at(0), ExpiresAt: at(time.Hour)}), ""},
		{"bad subject", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.RegisteredClaims{Subject: "a b", IssuedAt: at(0), ExpiresAt: at(time.Hour)}), ""},
		{"tampered", "Bearer " + good[:len(good)-2] + "xx", ""},
		{"not bearer", "Basic " + good, ""},
		{"missing", "", ""},
		{"garbage", "Bearer not.a.token", ""},
	}
	id := TokenIdentity(secret, 30*time.Second, func() time.Time { return now })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			user, err := id(r)
			if tc.user != "" && (err != nil || user != tc.user) {
				t.Fatalf("got %q %v, want %q", user, err, tc.user)
			}
			if tc.user == "" && !errors.Is(err, shardstock.ErrUnauthorized) {
				t.Fatalf("got %q %v, want ErrUnauthorized", user, err)
			}
		})
	}
}

func TestMintTokenRefusesBadInput(t *testing.T) {
	if _, err := MintToken(secret, "a b", time.Hour, time.Now()); err == nil {
		t.Fatal("bad user accepted")
	}
	if _, err := MintToken(secret, "ok", 25*time.Hour, time.Now()); err == nil {
		t.Fatal("a 25h token minted")
	}
}

// FuzzTokenIdentity: whatever the header, the check answers a valid user
// id or ErrUnauthorized, and never panics.
func FuzzTokenIdentity(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	good, _ := MintToken(secret, "alice", time.Hour, now)
	for _, s := range []string{good, "Bearer " + good, "Bearer ", "Bearer a.b.c", "Bearer eyJhbGciOiJub25lIn0.e30.", strings.Repeat("A", 300)} {
		f.Add(s)
	}
	id := TokenIdentity(secret, 30*time.Second, func() time.Time { return now })
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header["Authorization"] = []string{"Bearer " + header}
		user, err := id(r)
		if err == nil && !shardstock.ValidID(user) {
			t.Fatalf("accepted an invalid user %q", user)
		}
		if err != nil && !errors.Is(err, shardstock.ErrUnauthorized) {
			t.Fatalf("error %v is not ErrUnauthorized", err)
		}
	})
}
