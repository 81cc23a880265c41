package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// testCA writes a CA and a server certificate for 127.0.0.1, made now, to
// dir (ca.crt, server.crt, server.key) and returns the CA's pool.
func testCA(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	write := func(name, kind string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shardstock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	write("ca.crt", "CERTIFICATE", caDER)
	write("server.crt", "CERTIFICATE", srvDER)
	write("server.key", "PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool
}

// TestShardsOverTLS (issue 15, item 9): shards that listen on TLS only,
// with a CA made for the test: a coordinator given the CA sells through
// them; one that does not trust the CA cannot start on them (rather than
// sending stock over an unverified connection); nothing answers in plain
// text.
func TestShardsOverTLS(t *testing.T) {
	dir := t.TempDir()
	pool := testCA(t, dir)
	r := shardtest.StartWith(t, 3, shardtest.Options{TLSDir: dir})
	for _, u := range r.URLs() {
		if !strings.HasPrefix(u, "rediss://") {
			t.Fatalf("shard URL %s", u)
		}
	}
	db := "sqlite:" + t.TempDir() + "/orders.db"
	m := startServer(t, r.URLs(), func(c *config.Config) { c.RedisCAs, c.DB = pool, db })
	putProduct(t, m.URL(), "tls", `{"stock":10}`)
	if rep := purchase(t, m.URL(), "tls", "alice"); rep.status != 200 {
		t.Fatalf("purchase over TLS shards: %d %s", rep.status, rep.raw)
	}
	// Without the CA (same catalog, so nothing else stops it): the
	// shards' certificates are not trusted, and nothing is sold.
	untrusting := NewMain(&config.Config{HTTPAddr: "127.0.0.1:0", Shards: r.URLs(), AdminToken: testToken, UserAuth: "header",
		ShardTimeout: 250 * time.Millisecond, MQ: "streams", DB: db, OrderRate: 1000}, testLog(t))
	err := untrusting.Run(context.Background())
	if err == nil {
		if rep := purchase(t, untrusting.URL(), "tls", "bob"); rep.status == 200 {
			t.Fatal("a coordinator that does not trust the shards' CA sold through them")
		}
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("the untrusting coordinator failed, but not over the certificate: %v", err)
	}
	untrusting.Close()
	// Plain text to a TLS port gets no answer.
	c, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(r.URLs()[0], "rediss://"), "/0"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("PING\r\n"))
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	if n, _ := c.Read(buf); strings.Contains(string(buf[:n]), "PONG") {
		t.Fatal("a TLS shard answered PING in plain text")
	}
}
