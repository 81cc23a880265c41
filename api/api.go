// Package api is shardstock's external HTTP contract: the OpenAPI document
// (openapi.yaml, served at /openapi.yaml) and the pieces every handler uses
// to honour it — the error body, the one table of error codes to HTTP
// statuses, the buyer identity type, the admin bearer check, request ids
// and logs, and strict JSON decoding of request bodies — and the JSON
// API's paths, headers and request bodies (routes.go), defined once for
// the server and its clients. It imports only the domain.
package api

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
)

// OpenAPI is the contract document.
//
//go:embed openapi.yaml
var OpenAPI []byte

// MaxBody is the largest request body accepted, in bytes.
const MaxBody = 16 << 10

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// ErrorHandler returns echo's error handler: domain errors map through
// ErrorResponse, echo's own (unknown route, wrong method) keep
// their status with a code, and anything else is a 500 whose details go to
// the log only.
func ErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		WriteError(c.Response(), c.Request(), c.Path(), err, log)
	}
}

// WriteError answers err as the contract says (the status from
// ErrorResponse, the cached error body); a 5xx is logged with
// the route and the request id, its details never sent. It returns the
// status written.
func WriteError(w http.ResponseWriter, r *http.Request, route string, err error, log *slog.Logger) int {
	if e, ok := err.(*shardstock.Error); ok { // a sentinel itself (sold out, above all): nothing to look up
		if a, ok := sentinels[e]; ok {
			WriteJSON(w, a.status, a.body)
			return a.status
		}
	}
	status, body := errorResponse(err)
	h := w.Header()
	if status >= 500 {
		log.Error("request failed", "method", r.Method, "route", route, "status", status,
			"request_id", h.Get(echo.HeaderXRequestID), "err", err)
	}
	if status == http.StatusTooManyRequests && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	WriteJSON(w, status, errorBodies.encode(body))
	return status
}

// jsonType is the Content-Type of every JSON answer, shared: net/http
// never changes a header's values once they are set.
var jsonType = []string{echo.MIMEApplicationJSON}

// WriteJSON writes an encoded JSON body with status.
func WriteJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	w.Write(body)
}

// sentinels are the answers to the sentinel errors themselves (not wrapped,
// no message of their own), encoded once. Rate limiting and the 5xx
// errors are not among them: they set headers or are logged.
var sentinels = func() map[*shardstock.Error]answer {
	m := map[*shardstock.Error]answer{}
	for _, e := range []*shardstock.Error{shardstock.ErrSoldOut, shardstock.ErrEnded, shardstock.ErrNotStarted,
		shardstock.ErrLimitReached, shardstock.ErrNotFound, shardstock.ErrUnauthorized, shardstock.ErrInvalid,
		shardstock.ErrTooLarge, shardstock.ErrUnsupported, shardstock.ErrConflict,
		shardstock.ErrNoProduct, shardstock.ErrNoOrder, shardstock.ErrNoTicket, shardstock.ErrNoShard, shardstock.ErrNoSession} {
		status, body := errorResponse(e)
		m[e] = answer{status, MarshalLine(body)}
	}
	return m
}()

type answer struct {
	status int
	body   []byte
}

// errorBodies keeps the encoded form of the error bodies seen so far: the
// same few (sold out, above all) answer most requests during a sale. It
// stops adding at maxCachedBodies, so bodies with varying messages cannot
// grow it without bound.
var errorBodies bodyCache

const maxCachedBodies = 256

type bodyCache struct {
	m sync.Map // ErrorBody -> []byte
	n atomic.Int32
}

func (b *bodyCache) encode(body ErrorBody) []byte {
	if v, ok := b.m.Load(body); ok {
		return v.([]byte)
	}
	enc := MarshalLine(body)
	if b.n.Load() < maxCachedBodies {
		if _, loaded := b.m.LoadOrStore(body, enc); !loaded {
			b.n.Add(1)
		}
	}
	return enc
}

func errorResponse(err error) (int, ErrorBody) {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return he.Code, ErrorBody{shardstock.ErrNotFound.Code, "no such route"}
		case http.StatusMethodNotAllowed:
			return he.Code, ErrorBody{"method_not_allowed", "method not allowed on this route"}
		case http.StatusRequestEntityTooLarge:
			return he.Code, ErrorBody{shardstock.ErrTooLarge.Code, shardstock.ErrTooLarge.Message}
		}
	}
	status, e := ErrorResponse(err)
	return status, ErrorBody{e.Code, e.Message}
}

// httpStatus is the one table from error code to HTTP status.
var httpStatus = map[string]int{
	shardstock.ErrInvalid.Code:         http.StatusBadRequest,
	shardstock.ErrUnauthorized.Code:    http.StatusUnauthorized,
	shardstock.ErrNotFound.Code:        http.StatusNotFound,
	shardstock.ErrNotStarted.Code:      http.StatusForbidden,
	shardstock.ErrQueueNotOpen.Code:    http.StatusForbidden,
	shardstock.ErrNotAdmitted.Code:     http.StatusForbidden,
	shardstock.ErrRevoked.Code:         http.StatusForbidden,
	shardstock.ErrWorkRequired.Code:    http.StatusForbidden,
	shardstock.ErrEnded.Code:           http.StatusForbidden,
	shardstock.ErrPaused.Code:          http.StatusForbidden,
	shardstock.ErrLimitReached.Code:    http.StatusConflict,
	shardstock.ErrConflict.Code:        http.StatusConflict,
	shardstock.ErrKeyReused.Code:       http.StatusUnprocessableEntity,
	shardstock.ErrSoldOut.Code:         http.StatusGone,
	shardstock.ErrTooLarge.Code:        http.StatusRequestEntityTooLarge,
	shardstock.ErrHeadersTooLarge.Code: http.StatusRequestHeaderFieldsTooLarge,
	shardstock.ErrUnsupported.Code:     http.StatusUnsupportedMediaType,
	shardstock.ErrRateLimited.Code:     http.StatusTooManyRequests,
	shardstock.ErrUnavailable.Code:     http.StatusServiceUnavailable,
	shardstock.ErrInternal.Code:        http.StatusInternalServerError,
}

// ErrorResponse maps err to the HTTP status and the public *Error to show
// (shardstock.Public); a code with no status here is ErrInternal.
func ErrorResponse(err error) (int, *shardstock.Error) {
	e := shardstock.Public(err)
	if st, ok := httpStatus[e.Code]; ok {
		return st, e
	}
	return http.StatusInternalServerError, shardstock.ErrInternal
}

// LimitHeaders answers 431 in the API's JSON (headers_too_large) to a
// request whose request line and headers exceed max bytes, before next
// sees it. (The server's MaxHeaderBytes must be larger for it to run.)
func LimitHeaders(max int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > max {
			WriteError(w, r, "", shardstock.ErrHeadersTooLarge, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Identity extracts the buyer's user id from a request, or returns
// shardstock.ErrUnauthorized: the buyer API and the orders API share it
// (flashsale.TokenIdentity, flashsale.ProxiedHeaderIdentity).
type Identity func(r *http.Request) (string, error)

// AdminAuth admits requests carrying "Authorization: Bearer <token>",
// compared in constant time; others get 401. It guards the admin API and
// pprof.
func AdminAuth(token string) echo.MiddlewareFunc {
	want := []byte(token)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			got, _ := BearerToken(c.Request())
			if token == "" || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
				c.Response().Header().Set("WWW-Authenticate", `Bearer realm="shardstock-admin"`)
				return shardstock.ErrUnauthorized
			}
			return next(c)
		}
	}
}

// BearerToken is the token of r's "Authorization: Bearer <token>" header;
// the scheme's name is matched in any case, as RFC 9110 says ("bearer" was
// a 401).
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return token, true
}

// RequestIDs returns a request id generator for echo's RequestID
// middleware: a counter encrypted with AES under a key drawn once per
// process. Ids are unique within a process (a block cipher is a
// permutation) and, with a random key each, across processes; they cost no
// entropy per request, and they do not count, so a client cannot read the
// server's request volume off two of its answers.
func RequestIDs() func() string {
	var key [16]byte
	rand.Read(key[:])
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	var n atomic.Uint64
	return func() string {
		var in, out [16]byte
		binary.BigEndian.PutUint64(in[8:], n.Add(1))
		block.Encrypt(out[:], in[:])
		return hex.EncodeToString(out[:])
	}
}

// RequestLog logs every request at debug level (method, route, status,
// latency, request id) and failed ones (5xx) at warn. Headers and bodies are
// never logged, so tokens and identities stay out of the logs.
func RequestLog(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			LogRequest(log, c.Request(), c.Path(), c.Response().Status, start, c.Response().Header().Get(echo.HeaderXRequestID))
			return nil
		}
	}
}

// LogRequest is RequestLog's line for one request answered status.
func LogRequest(log *slog.Logger, r *http.Request, route string, status int, start time.Time, requestID string) {
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelWarn
	}
	if !log.Enabled(r.Context(), level) {
		return
	}
	log.Log(r.Context(), level, "request", "method", r.Method, "route", route,
		"status", status, "took", time.Since(start), "request_id", requestID)
}

// Decode reads the request body into dst strictly: at most MaxBody bytes
// (ErrTooLarge), Content-Type application/json when there is a body
// (ErrUnsupported), no unknown fields and nothing after the JSON value
// (ErrInvalid). An empty body leaves dst unchanged when allowEmpty.
func Decode(c echo.Context, dst any, allowEmpty bool) error {
	return DecodeRequest(c.Response(), c.Request(), dst, allowEmpty)
}

// DecodeRequest is Decode for a plain net/http handler.
func DecodeRequest(w http.ResponseWriter, r *http.Request, dst any, allowEmpty bool) error {
	if r.ContentLength == 0 && allowEmpty {
		return nil // no body (a chunked one has length -1)
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeBody(r, body, dst, allowEmpty)
}

// ReadBody reads the request body, at most MaxBody bytes (ErrTooLarge).
func ReadBody(c echo.Context) ([]byte, error) { return readBody(c.Response(), c.Request()) }

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength == 0 {
		return nil, nil // no body (a chunked one has length -1)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, shardstock.ErrTooLarge
	case err != nil:
		return nil, shardstock.Invalid("could not read the request body")
	}
	return body, nil
}

// DecodeBody decodes a body read by ReadBody, as Decode does.
func DecodeBody(c echo.Context, body []byte, dst any, allowEmpty bool) error {
	return decodeBody(c.Request(), body, dst, allowEmpty)
}

func decodeBody(r *http.Request, body []byte, dst any, allowEmpty bool) error {
	switch {
	case len(bytes.TrimSpace(body)) == 0 && allowEmpty:
		return nil
	case len(bytes.TrimSpace(body)) == 0:
		return shardstock.Invalid("a JSON body is required")
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return shardstock.ErrUnsupported
	}
	return decodeStrict(body, dst)
}

// DecodeStrict decodes a JSON object into dst (a pointer to a struct):
// unknown fields, a field named in another case than its own, a field given
// twice, and anything after the object are refused with ErrInvalid.
// encoding/json alone takes {"stock":10,"Stock":99} as 99 units: the last
// of the two, and matched case-insensitively.
func DecodeStrict(body []byte, dst any) error { return decodeStrict(body, dst) }

func decodeStrict(body []byte, dst any) error {
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return shardstock.Invalid("the body must be a JSON object")
	}
	if err := checkKeys(body, fieldNames(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return shardstock.Invalid("malformed JSON: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return shardstock.Invalid("malformed JSON: unexpected data after the JSON value")
	}
	return nil
}

// checkKeys refuses an object that names a key twice (in any case), at
// any depth, and a top-level key that matches one of fields only in
// another case.
func checkKeys(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return nil // malformed: the decoder says why
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.object && top.key {
			lower := strings.ToLower(k)
			if top.seen[lower] {
				return shardstock.Invalid(fmt.Sprintf("field %q is given twice", k))
			}
			top.seen[lower] = true
			if len(stack) == 1 && !fields[k] {
				for f := range fields {
					if strings.EqualFold(f, k) {
						return shardstock.Invalid(fmt.Sprintf("unknown field %q (did you mean %q?)", k, f))
					}
				}
			}
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true // a value ended: a key comes next
		}
	}
}

// fieldNames lists the JSON names of a struct's fields (and of its
// embedded structs'), as encoding/json would name them.
func fieldNames(dst any) map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(dst)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return out
	}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				walk(f.Type)
			case name != "":
				out[name] = true
			case f.IsExported():
				out[f.Name] = true
			}
		}
	}
	walk(t)
	return out
}

// OptionalTime is an RFC 3339 time that may be absent, null or "".
type OptionalTime struct{ time.Time }

// UnmarshalJSON accepts null, "" or an RFC 3339 string.
func (t *OptionalTime) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("time must be an RFC 3339 string")
	}
	if s == nil || *s == "" {
		t.Time = time.Time{}
		return nil
	}
	v, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return errors.New("time must be RFC 3339, like 2026-11-30T12:00:00Z")
	}
	t.Time = v
	return nil
}

// MethodNotAllowedRoute names the routes AnswerMethodNotAllowed adds.
const MethodNotAllowedRoute = "method-not-allowed"

// AnswerMethodNotAllowed makes every path of e answer 405, with an Allow
// header, to the methods it does not serve. Echo's groups end in a
// catch-all that would answer 404 instead; call this after every route is
// registered.
func AnswerMethodNotAllowed(e *echo.Echo) {
	allowed := map[string][]string{}
	var paths []string
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound || r.Name == MethodNotAllowedRoute {
			continue
		}
		if _, seen := allowed[r.Path]; !seen {
			paths = append(paths, r.Path)
		}
		allowed[r.Path] = append(allowed[r.Path], r.Method)
	}
	all := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodTrace, "QUERY"}
	for _, p := range paths {
		methods := allowed[p]
		allow := strings.Join(methods, ", ")
		for _, m := range all {
			if slices.Contains(methods, m) {
				continue
			}
			e.Add(m, p, func(c echo.Context) error {
				c.Response().Header().Set("Allow", allow)
				return echo.ErrMethodNotAllowed
			}).Name = MethodNotAllowedRoute
		}
	}
}

// MarshalLine is v in JSON and a newline, with <, > and & as they are:
// json.Marshal's \u003e read as "stock must be \u003e 0" to anyone who
// saw the body raw (every answer is application/json with nosniff, so no
// browser takes it for HTML). v must be encodable (the API's own types).
func MarshalLine(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("api.MarshalLine: %v", err))
	}
	return b.Bytes()
}

// JSONSerializer is echo's JSON serializer with <, > and & as they are in
// what it writes (MarshalLine); reading is echo's own.
type JSONSerializer struct{ echo.DefaultJSONSerializer }

// Serialize writes i to c's response.
func (JSONSerializer) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}
