package flashsale

import (
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// MinSecretLen is the shortest accepted HMAC secret, in bytes.
const MinSecretLen = 32

// MaxTokenTTL bounds a token's lifetime (exp - iat).
const MaxTokenTTL = 24 * time.Hour

// A buyer token names its issuer and audience, and a token that does not
// name these is refused: a token some other service signed with the same
// secret, for another purpose, does not pass for a buyer's here.
const (
	TokenIssuer   = "shardstock"
	TokenAudience = "shardstock-buyers"
)

// TokenIdentity verifies "Authorization: Bearer <token>": a JWT signed with
// HS256 and secret, issued by TokenIssuer for TokenAudience, whose subject
// is the user id (1-64 of [A-Za-z0-9_-]).
// The token must carry exp and iat; it is refused once expired or when
// issued in the future, each with skew of tolerance for clocks, and when it
// claims a lifetime over MaxTokenTTL. Any other algorithm (none included) is
// refused. now is the clock (nil: time.Now).
func TokenIdentity(secret []byte, skew time.Duration, now func() time.Time) api.Identity {
	if now == nil {
		now = time.Now
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(skew), jwt.WithTimeFunc(now),
		jwt.WithIssuer(TokenIssuer), jwt.WithAudience(TokenAudience))
	key := func(*jwt.Token) (any, error) { return secret, nil }
	return func(r *http.Request) (string, error) {
		raw, ok := api.BearerToken(r)
		if !ok || raw == "" {
			return "", unauthorized("a bearer token is required")
		}
		user, err := parseToken(parser, key, raw)
		if err != nil {
			return "", unauthorized(err.Error())
		}
		return user, nil
	}
}

func parseToken(parser *jwt.Parser, key jwt.Keyfunc, raw string) (string, error) {
	var claims jwt.RegisteredClaims
	if _, err := parser.ParseWithClaims(raw, &claims, key); err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return "", errors.New("the token has expired")
		case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
			return "", errors.New("the token is issued in the future")
		}
		return "", errors.New("the token is invalid")
	}
	if claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > MaxTokenTTL {
		return "", errors.New("the token must carry iat and live at most 24h")
	}
	if !shardstock.ValidID(claims.Subject) {
		return "", errors.New("the token's subject is not a valid user id")
	}
	return claims.Subject, nil
}

func unauthorized(msg string) error {
	return &shardstock.Error{Code: shardstock.ErrUnauthorized.Code, Message: msg}
}

// MintToken signs a token for user, valid for ttl from now (at most
// MaxTokenTTL).
func MintToken(secret []byte, user string, ttl time.Duration, now time.Time) (string, error) {
	if !shardstock.ValidID(user) {
		return "", errors.New("user must be 1-64 characters of [A-Za-z0-9_-]")
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return "", errors.New("ttl must be positive and at most 24h")
	}
	claims := jwt.RegisteredClaims{Subject: user, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		Issuer: TokenIssuer, Audience: jwt.ClaimStrings{TokenAudience}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// ProxiedHeaderIdentity is HeaderIdentity for requests whose peer is one
// of trusted (the authenticating gateway); from any other peer, X-User-ID
// is not believed (401), so a buyer who reaches the coordinator some other
// way cannot claim to be someone else.
func ProxiedHeaderIdentity(trusted []netip.Prefix) api.Identity {
	return func(r *http.Request) (string, error) {
		if !Trusted(trusted, r.RemoteAddr) {
			return "", unauthorized("X-User-ID is taken only from a trusted proxy (SHARDSTOCK_TRUSTED_PROXIES)")
		}
		return HeaderIdentity(r)
	}
}

// Trusted reports whether the peer at remoteAddr (host:port) is in one of
// the prefixes.
func Trusted(prefixes []netip.Prefix, remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
