package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const adminUsage = `Usage: shardstock admin [--url URL] [--json] COMMAND [ARGS]

An operator's client for the admin API. The address comes from --url or
SHARDSTOCK_ADMIN_URL (default http://127.0.0.1:8080), the token from
SHARDSTOCK_ADMIN_TOKEN (never from a flag: ps would show it).

Commands:
  status [PRODUCT]          every product (or one) with its stock on every shard
  shards                    every shard and whether it answers
  pause PRODUCT             the kill switch: purchases answer 403 paused
  resume PRODUCT
  add PRODUCT N [KEY]       put N more units on sale (KEY: an idempotency key)
  remove PRODUCT N [KEY]    take up to N salable units back
  end PRODUCT [RFC3339]     move the window's end (default: now)
  archive PRODUCT           keep the final totals, delete the shard keys
  rebalance PRODUCT         spread salable units over the live shards
  drain SHARD               take a shard out of rotation ("undrain SHARD" puts it back)
  reconcile PRODUCT         compare the shards with the orders

--json prints the server's answer as it came, for scripts; otherwise tables.
Exit status: 0 on success, 1 when the server refused (its error on stderr), 2 on bad usage.
`

// admin is "shardstock admin": the admin API from a shell.
func admin(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("url", "", "server base URL (default: SHARDSTOCK_ADMIN_URL, else http://127.0.0.1:8080)")
	asJSON := fs.Bool("json", false, "print the server's JSON answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, adminUsage)
			return 0
		}
		fmt.Fprintf(stderr, "shardstock: admin: %v (see shardstock admin --help)\n", err)
		return 2
	}
	base := *url
	if base == "" {
		base = getenv("SHARDSTOCK_ADMIN_URL")
	}
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	c := adminClient{base: strings.TrimSuffix(base, "/"), token: getenv("SHARDSTOCK_ADMIN_TOKEN"),
		http: &http.Client{Timeout: 60 * time.Second}}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	req, show, err := adminRequest(rest)
	if err != nil {
		fmt.Fprintf(stderr, "shardstock: admin: %v (see shardstock admin --help)\n", err)
		return 2
	}
	body, status, err := c.do(req)
	if err != nil {
		fmt.Fprintf(stderr, "shardstock: admin: %v\n", err)
		return 1
	}
	if status >= 300 {
		var e struct{ Error, Message string }
		json.Unmarshal(body, &e)
		fmt.Fprintf(stderr, "shardstock: admin: %s: %d %s: %s\n", rest[0], status, e.Error, e.Message)
		return 1
	}
	if *asJSON || show == nil {
		stdout.Write(body)
		if !bytes.HasSuffix(body, []byte("\n")) {
			fmt.Fprintln(stdout)
		}
		return 0
	}
	if err := show(stdout, body); err != nil {
		fmt.Fprintf(stderr, "shardstock: admin: reading the answer: %v\n", err)
		return 1
	}
	return 0
}

type adminCall struct {
	method, path, body string
	header             map[string]string
}

// adminRequest maps a command line to its call and how to show the answer
// (nil: as it came).
func adminRequest(args []string) (adminCall, func(io.Writer, []byte) error, error) {
	need := func(n int) error {
		if len(args) < n+1 {
			return fmt.Errorf("%s needs %d argument(s)", args[0], n)
		}
		return nil
	}
	product := func() string { return "/admin/v1/products/" + args[1] }
	switch args[0] {
	case "status":
		if len(args) > 1 {
			return adminCall{method: "GET", path: product()}, showProduct, nil
		}
		return adminCall{method: "GET", path: "/admin/v1/products"}, showProducts, nil
	case "shards":
		return adminCall{method: "GET", path: "/admin/v1/shards"}, showShards, nil
	case "pause", "resume", "archive", "rebalance":
		if err := need(1); err != nil {
			return adminCall{}, nil, err
		}
		show := showProduct
		if args[0] == "rebalance" {
			show = nil
		}
		return adminCall{method: "POST", path: product() + "/" + args[0]}, show, nil
	case "add", "remove":
		if err := need(2); err != nil {
			return adminCall{}, nil, err
		}
		n, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil || n <= 0 {
			return adminCall{}, nil, fmt.Errorf("%s: %q is not a positive number of units", args[0], args[2])
		}
		call := adminCall{method: "POST", path: product() + "/stock", body: fmt.Sprintf(`{%q:%d}`, args[0], n)}
		if len(args) > 3 {
			call.header = map[string]string{"Idempotency-Key": args[3]}
		}
		return call, showProduct, nil
	case "end":
		if err := need(1); err != nil {
			return adminCall{}, nil, err
		}
		at := time.Now().UTC().Format(time.RFC3339Nano)
		if len(args) > 2 {
			if _, err := time.Parse(time.RFC3339, args[2]); err != nil {
				return adminCall{}, nil, fmt.Errorf("end: %q is not an RFC 3339 time", args[2])
			}
			at = args[2]
		}
		return adminCall{method: "PATCH", path: product(), body: fmt.Sprintf(`{"ends_at":%q}`, at)}, showProduct, nil
	case "drain", "undrain":
		if err := need(1); err != nil {
			return adminCall{}, nil, err
		}
		if _, err := strconv.Atoi(args[1]); err != nil {
			return adminCall{}, nil, fmt.Errorf("%s: %q is not a shard index", args[0], args[1])
		}
		return adminCall{method: "POST", path: "/admin/v1/shards/" + args[1] + "/drain",
			body: fmt.Sprintf(`{"drained":%t}`, args[0] == "drain")}, nil, nil
	case "reconcile":
		if err := need(1); err != nil {
			return adminCall{}, nil, err
		}
		return adminCall{method: "GET", path: product() + "/reconcile"}, nil, nil
	}
	return adminCall{}, nil, fmt.Errorf("unknown command %q", args[0])
}

type adminClient struct {
	base, token string
	http        *http.Client
}

func (c adminClient) do(call adminCall) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(context.Background(), call.method, c.base+call.path, strings.NewReader(call.body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if call.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range call.header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return body, resp.StatusCode, err
}

// adminProduct is what the tables show of a product view.
type adminProduct struct {
	ID       string `json:"id"`
	Stock    int64  `json:"stock"`
	Paused   bool   `json:"paused"`
	Archived bool   `json:"archived"`
	EndsAt   string `json:"ends_at"`
	Totals   struct {
		Salable, Locked, Sold int64
	} `json:"totals"`
	Shards []struct {
		Index                        int
		Addr                         string
		Up                           bool
		Salable, Locked, Sold, Alloc *int64
	} `json:"shards"`
}

func (p adminProduct) state() string {
	switch {
	case p.Archived:
		return "archived"
	case p.Paused:
		return "paused"
	}
	return "on"
}

func showProducts(w io.Writer, body []byte) error {
	var ps []adminProduct
	if err := json.Unmarshal(body, &ps); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product\tstate\tstock\tsalable\tlocked\tsold\tends\t")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", p.ID, p.state(), p.Stock, p.Totals.Salable, p.Totals.Locked, p.Totals.Sold, orDash(p.EndsAt))
	}
	return tw.Flush()
}

func showProduct(w io.Writer, body []byte) error {
	var p adminProduct
	if err := json.Unmarshal(body, &p); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s, stock %d, salable %d, locked %d, sold %d, ends %s\n",
		p.ID, p.state(), p.Stock, p.Totals.Salable, p.Totals.Locked, p.Totals.Sold, orDash(p.EndsAt))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\taddress\tup\tsalable\tlocked\tsold\talloc\t")
	for _, s := range p.Shards {
		fmt.Fprintf(tw, "%d\t%s\t%t\t%s\t%s\t%s\t%s\t\n", s.Index, s.Addr, s.Up, num(s.Salable), num(s.Locked), num(s.Sold), num(s.Alloc))
	}
	return tw.Flush()
}

func showShards(w io.Writer, body []byte) error {
	var ss []struct {
		Index     int
		Addr      string
		Up        bool
		LastError string `json:"last_error"`
		Breaker   string
	}
	if err := json.Unmarshal(body, &ss); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "shard\taddress\tup\tbreaker\tlast error")
	for _, s := range ss {
		fmt.Fprintf(tw, "%d\t%s\t%t\t%s\t%s\n", s.Index, s.Addr, s.Up, orDash(s.Breaker), orDash(s.LastError))
	}
	return tw.Flush()
}

func num(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
