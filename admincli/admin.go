// Package admincli is "shardstock admin": an operator's client for the
// admin API (API.md), with tables for people and --json for scripts. It
// talks to the server through package client only.
package admincli

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

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/client"
	"github.com/shardstock/shardstock/waitroom"
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
  queue PRODUCT             the product's waiting room: joined, now serving, waiting
  queue PRODUCT open MODE RATE WINDOW [LEAD [DIFFICULTY]]
                            open (or change) it: MODE fifo or draw, RATE places admitted
                            a second, WINDOW seconds an admitted buyer has to buy, LEAD
                            seconds before the sale buyers may join, DIFFICULTY proof of
                            work in zero bits
  queue PRODUCT pause|resume  stop or run the number now serving
  queue PRODUCT advance N   admit N more places at once
  queue PRODUCT revoke USER the buyer's place admits nobody

--json prints the server's answer as it came, for scripts; otherwise tables.
Exit status: 0 on success, 1 when the server refused (its error on stderr), 2 on bad usage.
`

// Main is "shardstock admin": the admin API from a shell (the usage
// above). The exit status is 0 on success, 1 when the server refused or did
// not answer, 2 on bad usage.
func Main(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
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
	c := &client.Client{URL: strings.TrimSuffix(base, "/"), Token: getenv("SHARDSTOCK_ADMIN_TOKEN"),
		HTTP: &http.Client{Timeout: 60 * time.Second}}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	cmd, err := adminRequest(rest)
	if err != nil {
		fmt.Fprintf(stderr, "shardstock: admin: %v (see shardstock admin --help)\n", err)
		return 2
	}
	body, err := cmd.call(context.Background(), c)
	var refused *client.Error
	if errors.As(err, &refused) {
		fmt.Fprintf(stderr, "shardstock: admin: %s: %d %s: %s\n", rest[0], refused.Status, refused.Code, refused.Message)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "shardstock: admin: %v\n", err)
		return 1
	}
	return showAnswer(stdout, stderr, body, cmd.show, *asJSON)
}

// showAnswer prints an answer: as it came with asJSON or without a show,
// else through show.
func showAnswer(stdout, stderr io.Writer, body []byte, show func(io.Writer, []byte) error, asJSON bool) int {
	if asJSON || show == nil {
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

// adminCommand is a command line's call and how to show its answer (nil:
// as it came).
type adminCommand struct {
	call func(context.Context, *client.Client) (json.RawMessage, error)
	show func(io.Writer, []byte) error
}

// adminRequest maps a command line to its call and how to show the answer.
func adminRequest(args []string) (adminCommand, error) {
	need := func(n int) error {
		if len(args) < n+1 {
			return fmt.Errorf("%s needs %d argument(s)", args[0], n)
		}
		return nil
	}
	switch args[0] {
	case "status", "shards":
		return adminRead(args), nil
	case "pause", "resume", "archive", "rebalance", "reconcile":
		if err := need(1); err != nil {
			return adminCommand{}, err
		}
		return adminOnProduct(args[0], args[1]), nil
	case "add", "remove":
		if err := need(2); err != nil {
			return adminCommand{}, err
		}
		return adminStock(args)
	case "end":
		if err := need(1); err != nil {
			return adminCommand{}, err
		}
		return adminEnd(args)
	case "drain", "undrain":
		if err := need(1); err != nil {
			return adminCommand{}, err
		}
		return adminDrain(args)
	case "queue":
		if err := need(1); err != nil {
			return adminCommand{}, err
		}
		return adminQueue(args)
	}
	return adminCommand{}, fmt.Errorf("unknown command %q", args[0])
}

// adminRead is status [PRODUCT] and shards.
func adminRead(args []string) adminCommand {
	switch {
	case args[0] == "shards":
		return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
			return c.Shards(ctx)
		}, show: showShards}
	case len(args) > 1:
		return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
			return c.Product(ctx, args[1])
		}, show: showProduct}
	}
	return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
		return c.Products(ctx)
	}, show: showProducts}
}

// adminOnProduct is a command whose only argument is a product.
func adminOnProduct(name, product string) adminCommand {
	calls := map[string]func(*client.Client, context.Context, string) (json.RawMessage, error){
		"pause": (*client.Client).Pause, "resume": (*client.Client).Resume, "archive": (*client.Client).Archive,
		"rebalance": (*client.Client).Rebalance, "reconcile": (*client.Client).Reconcile,
	}
	show := showProduct
	switch name {
	case "rebalance":
		show = nil
	case "reconcile":
		show = showReconcile
	}
	return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
		return calls[name](c, ctx, product)
	}, show: show}
}

// adminStock is add and remove: PRODUCT N [KEY].
func adminStock(args []string) (adminCommand, error) {
	n, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil || n <= 0 {
		return adminCommand{}, fmt.Errorf("%s: %q is not a positive number of units", args[0], args[2])
	}
	change := api.StockChange{Add: n}
	if args[0] == "remove" {
		change = api.StockChange{Remove: n}
	}
	key := ""
	if len(args) > 3 {
		key = args[3]
	}
	return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
		return c.ChangeStock(ctx, args[1], change, key)
	}, show: showProduct}, nil
}

// adminEnd is end PRODUCT [RFC3339]: the window ends then (default: now).
func adminEnd(args []string) (adminCommand, error) {
	at := time.Now().UTC()
	if len(args) > 2 {
		t, err := time.Parse(time.RFC3339, args[2])
		if err != nil {
			return adminCommand{}, fmt.Errorf("end: %q is not an RFC 3339 time", args[2])
		}
		at = t
	}
	w := api.SaleWindow{EndsAt: &api.OptionalTime{Time: at}}
	return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
		return c.MoveWindow(ctx, args[1], w)
	}, show: showProduct}, nil
}

// adminDrain is drain and undrain SHARD.
func adminDrain(args []string) (adminCommand, error) {
	shard, err := strconv.Atoi(args[1])
	if err != nil {
		return adminCommand{}, fmt.Errorf("%s: %q is not a shard index", args[0], args[1])
	}
	return adminCommand{call: func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
		return c.Drain(ctx, shard, args[0] == "drain")
	}}, nil
}

// adminQueue is queue PRODUCT [open|pause|resume|advance|revoke ...]; the
// answer is the line's summary (showQueue).
func adminQueue(args []string) (adminCommand, error) {
	id := args[1]
	on := func(f func(context.Context, *client.Client) (json.RawMessage, error)) (adminCommand, error) {
		return adminCommand{call: f, show: showQueue}, nil
	}
	if len(args) == 2 {
		return on(func(ctx context.Context, c *client.Client) (json.RawMessage, error) { return c.Queues().Show(ctx, id) })
	}
	rest := args[3:]
	switch args[2] {
	case "open":
		d, err := queueDefinition(rest)
		if err != nil {
			return adminCommand{}, err
		}
		return on(func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
			return c.Queues().Define(ctx, id, d)
		})
	case "pause":
		return on(func(ctx context.Context, c *client.Client) (json.RawMessage, error) { return c.Queues().Pause(ctx, id) })
	case "resume":
		return on(func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
			return c.Queues().Resume(ctx, id)
		})
	case "advance":
		if len(rest) != 1 {
			return adminCommand{}, errors.New("queue advance needs N")
		}
		n, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil || n <= 0 {
			return adminCommand{}, fmt.Errorf("queue advance: %q is not a positive number of places", rest[0])
		}
		return on(func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
			return c.Queues().Advance(ctx, id, n)
		})
	case "revoke":
		if len(rest) != 1 {
			return adminCommand{}, errors.New("queue revoke needs USER")
		}
		return on(func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
			return c.Queues().Revoke(ctx, id, rest[0])
		})
	}
	return adminCommand{}, fmt.Errorf("queue: unknown action %q (open, pause, resume, advance, revoke)", args[2])
}

// queueDefinition reads MODE RATE WINDOW [LEAD [DIFFICULTY]].
func queueDefinition(args []string) (api.QueueDefinition, error) {
	if len(args) < 3 || len(args) > 5 {
		return api.QueueDefinition{}, errors.New("queue open needs MODE RATE WINDOW [LEAD [DIFFICULTY]]")
	}
	d := api.QueueDefinition{Mode: args[0]}
	var err error
	if d.Rate, err = strconv.ParseFloat(args[1], 64); err != nil {
		return d, fmt.Errorf("queue open: RATE %q is not a number", args[1])
	}
	ints := []*int64{&d.WindowSeconds, &d.LeadSeconds}
	for i, a := range args[2:min(len(args), 4)] {
		if *ints[i], err = strconv.ParseInt(a, 10, 64); err != nil {
			return d, fmt.Errorf("queue open: %q is not a number of seconds", a)
		}
	}
	if len(args) == 5 {
		if d.Difficulty, err = strconv.Atoi(args[4]); err != nil {
			return d, fmt.Errorf("queue open: DIFFICULTY %q is not a number", args[4])
		}
	}
	return d, nil
}

// adminProduct is what the tables show of a product view.
type adminProduct struct {
	ID       string `json:"id"`
	Stock    int64  `json:"stock"`
	Paused   bool   `json:"paused"`
	Archived bool   `json:"archived"`
	StartsAt string `json:"starts_at"`
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

// state is how the sale stands: archived, paused, ended, not started
// (by this machine's clock; the server judges by the shards'), or on.
func (p adminProduct) state() string {
	now := time.Now()
	switch {
	case p.Archived:
		return "archived"
	case p.Paused:
		return "paused"
	case past(p.EndsAt, now):
		return "ended"
	case p.StartsAt != "" && !past(p.StartsAt, now):
		return "not started"
	}
	return "on"
}

// past says whether the RFC 3339 time t is at or before now ("": never).
func past(t string, now time.Time) bool {
	at, err := time.Parse(time.RFC3339, t)
	return err == nil && !at.After(now)
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

// showReconcile is a reconciliation: whether the shards agree with the
// orders, each shard's drifts, and what was done.
func showReconcile(w io.Writer, body []byte) error {
	var r struct {
		Product string `json:"product"`
		InSync  bool   `json:"in_sync"`
		Shards  []struct {
			Index    int  `json:"index"`
			Up       bool `json:"up"`
			Counters *struct {
				Salable, Locked, Sold int64
			} `json:"counters"`
			Orders struct {
				AwaitingPayment int64 `json:"awaiting_payment"`
				Paid            int64 `json:"paid"`
			} `json:"orders"`
			Locked  int64 `json:"locked_drift"`
			Sold    int64 `json:"sold_drift"`
			Alloc   int64 `json:"alloc_drift"`
			Salable int64 `json:"salable_drift"`
		} `json:"shards"`
		Resettled int64    `json:"resettled"`
		Actions   []string `json:"actions"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return err
	}
	verdict := "in sync with the orders"
	if !r.InSync {
		verdict = "DRIFTS from the orders (see below)"
	}
	fmt.Fprintf(w, "%s: %s\n", r.Product, verdict)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\tup\tsalable\tlocked\tsold\tawaiting\tpaid\tlocked drift\tsold drift\talloc drift\tsalable drift\t")
	for _, s := range r.Shards {
		counters := "-\t-\t-"
		if c := s.Counters; c != nil {
			counters = fmt.Sprintf("%d\t%d\t%d", c.Salable, c.Locked, c.Sold)
		}
		fmt.Fprintf(tw, "%d\t%t\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.Index, s.Up, counters, s.Orders.AwaitingPayment, s.Orders.Paid,
			s.Locked, s.Sold, s.Alloc, s.Salable)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Resettled > 0 {
		fmt.Fprintf(w, "%d final orders marked to be settled again\n", r.Resettled)
	}
	for _, a := range r.Actions {
		fmt.Fprintln(w, "- "+a)
	}
	return nil
}

// showQueue is a waiting room's summary.
func showQueue(w io.Writer, body []byte) error {
	var q waitroom.Summary // (the server's own type: what GET AdminQueuePath answers)
	if err := json.Unmarshal(body, &q); err != nil {
		return err
	}
	state := "admitting"
	switch {
	case q.Paused:
		state = "paused by an operator"
	case q.Held:
		state = "held: no unit left for now"
	case q.Mode == "draw" && !q.Drawn:
		state = "not drawn yet"
	}
	starts := "-"
	if !q.Starts.IsZero() {
		starts = q.Starts.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range [][2]string{
		{"product", q.Product}, {"state", state},
		{"mode", fmt.Sprintf("%s, %g places a second, %ds to buy, open %ds before the sale", q.Mode, q.Rate, q.WindowSeconds, q.LeadSeconds)},
		{"sale starts", starts}, {"joined", strconv.FormatInt(q.Joined, 10)},
		{"admitted up to", strconv.FormatInt(q.Serving, 10)}, {"waiting", strconv.FormatInt(q.Waiting, 10)},
		{"revoked", strconv.Itoa(q.Revoked)}, {"proof of work", fmt.Sprintf("%d zero bits", q.Difficulty)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
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
