package flashsale

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
)

//go:embed web
var web embed.FS

// Sessions finds the sessions to show on the front page (sqlstore.Sessions):
// the current one (else the next, else the last), and the next to start
// after a time.
type Sessions interface {
	CurrentSession(ctx context.Context, now time.Time) (*shardstock.Session, error)
	NextSession(ctx context.Context, after time.Time) (*shardstock.Session, error)
}

// Pages serves the sale pages: the current session's products at /, one
// page per product at /products/{id} (rendered when what it shows changes),
// the operators' page at /admin/ and the static files. Live numbers come
// from the JSON APIs the pages poll. Publish writes the product pages to a
// directory an edge serves.
type Pages struct {
	catalog  Products
	sessions Sessions
	ids      func(ctx context.Context) ([]string, error)
	now      func() time.Time
	tmpl     *template.Template
	static   http.Handler            // the scripts and styles, under /static/
	mu       sync.Mutex              // guards rendered and front
	rendered map[string]renderedPage // product id -> page
	front    frontPage               // the front page, made at most every frontTTL
}

// PagesConfig sets up Pages; zero values mean the defaults.
type PagesConfig struct {
	Products Products // the catalog the pages show
	Sessions Sessions // the sale sessions (the front page's)
	// IDs lists the catalog's products (the front page shows those on
	// sale outside the session too); nil: only the session's.
	IDs func(ctx context.Context) ([]string, error)
	Now func() time.Time // default time.Now
}

// NewPages parses the embedded templates.
func NewPages(cfg PagesConfig) *Pages {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	now := cfg.Now
	t := template.Must(template.New("").Funcs(template.FuncMap{
		"when":  func(t time.Time) string { return when(t, now()) },
		"group": group,
	}).ParseFS(web, "web/*.html"))
	return &Pages{catalog: cfg.Products, sessions: cfg.Sessions, ids: cfg.IDs, now: cfg.Now, tmpl: t, rendered: map[string]renderedPage{},
		static: http.StripPrefix("/static/", http.FileServer(http.FS(assets{web})))}
}

// Static serves the pages' scripts and styles (GET /static/*).
func (p *Pages) Static(c echo.Context) error {
	p.static.ServeHTTP(c.Response(), c.Request())
	return nil
}

// assets are the scripts and styles under web/, and nothing else of it:
// the page templates are not served raw.
type assets struct{ fs.FS }

func (a assets) Open(name string) (fs.File, error) {
	if ext := path.Ext(name); ext != ".css" && ext != ".js" {
		return nil, fs.ErrNotExist
	}
	return a.FS.Open("web/" + name)
}

// Admin serves the operators' page; its numbers come from the admin API.
func (p *Pages) Admin(c echo.Context) error {
	b, err := web.ReadFile("web/admin.html")
	if err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, b)
}

type indexData struct {
	Session *shardstock.Session
	Live    bool // the session's window contains now
	// Products are the session's; Others those on sale or coming outside
	// it (a product with a waiting room of its own, say).
	Products, Others []indexProduct
	Next             *shardstock.Session // the next session to start after the shown one
}

type indexProduct struct {
	*shardstock.Product
	State string // "on sale", "starts …", "ended", "paused"
}

// maxOthers bounds the products the front page lists outside the session.
const maxOthers = 50

// frontTTL is how long the front page is served as made: it reads every
// product's definition and the sessions, for everyone alike (its units
// left are polled live).
const frontTTL = 2 * time.Second

type frontPage struct {
	page []byte
	at   time.Time
}

// Index serves the front page: the current session's products (else the
// next session's, else the last's), the next session, and the other
// products on sale or coming. The units left are filled in live by the
// page's script.
func (p *Pages) Index(c echo.Context) error {
	now := p.now()
	p.mu.Lock()
	front := p.front
	p.mu.Unlock()
	if front.page != nil && now.Sub(front.at) < frontTTL && !now.Before(front.at) {
		return c.HTMLBlob(http.StatusOK, front.page)
	}
	page, err := p.index(c.Request().Context(), now)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.front = frontPage{page, now}
	p.mu.Unlock()
	return c.HTMLBlob(http.StatusOK, page)
}

func (p *Pages) index(ctx context.Context, now time.Time) ([]byte, error) {
	s, err := p.sessions.CurrentSession(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	d := indexData{Session: s}
	inSession := map[string]bool{}
	if s != nil {
		d.Live = !now.Before(s.StartsAt) && now.Before(s.EndsAt)
		for _, id := range s.Products {
			inSession[id] = true
			if prod, err := p.catalog.Product(ctx, id); err == nil && !prod.Archived {
				d.Products = append(d.Products, indexProduct{prod, saleState(prod, now)})
			}
		}
		if d.Next, err = p.sessions.NextSession(ctx, s.StartsAt); err != nil {
			return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
	}
	if p.ids != nil {
		ids, err := p.ids(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		for _, id := range ids {
			if len(d.Others) == maxOthers {
				break
			}
			prod, err := p.catalog.Product(ctx, id)
			if err != nil || inSession[id] || prod.Archived || (!prod.EndsAt.IsZero() && !now.Before(prod.EndsAt)) {
				continue
			}
			d.Others = append(d.Others, indexProduct{prod, saleState(prod, now)})
		}
	}
	var b bytes.Buffer
	if err := p.tmpl.ExecuteTemplate(&b, "index.html", d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

type productData struct {
	ID, Title, Price string
	Stock, Limit     int64
	StartsMS, EndsMS int64
}

// saleState is how prod's sale stands at now, for shoppers.
func saleState(prod *shardstock.Product, now time.Time) string {
	switch {
	case prod.Paused:
		return "paused"
	case !prod.EndsAt.IsZero() && !now.Before(prod.EndsAt):
		return "ended"
	case !prod.StartsAt.IsZero() && now.Before(prod.StartsAt):
		return "starts " + when(prod.StartsAt, now)
	}
	return "on sale"
}

// when is t for shoppers: UTC, with the year when it is not now's.
func when(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.Year() != now.Year() {
		return t.Format("Jan 2, 2006 15:04 MST")
	}
	return t.Format("Jan 2 15:04 MST")
}

// price is cents in currency: "49.00 EUR", the units grouped ("1,299.00
// USD"); without a currency, the number alone.
func price(cents int64, currency string) string {
	s := group(cents/100) + fmt.Sprintf(".%02d", cents%100)
	if currency != "" {
		s += " " + currency
	}
	return s
}

// group writes n with its digits grouped by three (1,000,000).
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Product serves a product's sale page; an unknown product gets a page
// saying so (not the API's JSON).
func (p *Pages) Product(c echo.Context) error {
	id := c.Param("id")
	var prod *shardstock.Product
	var err error = shardstock.ErrNoProduct
	if shardstock.ValidID(id) {
		prod, err = p.catalog.Product(c.Request().Context(), id)
	}
	if errors.Is(err, shardstock.ErrNotFound) {
		var b bytes.Buffer
		if err := p.tmpl.ExecuteTemplate(&b, "missing.html", nil); err != nil {
			return err
		}
		return c.HTMLBlob(http.StatusNotFound, b.Bytes())
	}
	if err != nil {
		return err
	}
	page, err := p.page(prod)
	if err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, page)
}

// page is prod's sale page, rendered again only when what it shows changed
// (a moved window, a paused product; the stock on it is polled live).
func (p *Pages) page(prod *shardstock.Product) ([]byte, error) {
	d := pageData(prod)
	p.mu.Lock()
	r, ok := p.rendered[prod.ID]
	p.mu.Unlock()
	if ok && r.data == d {
		return r.page, nil
	}
	page, err := p.render(d)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.rendered[prod.ID] = renderedPage{data: d, page: page}
	p.mu.Unlock()
	return page, nil
}

type renderedPage struct {
	data productData
	page []byte
}

func pageData(prod *shardstock.Product) productData {
	d := productData{ID: prod.ID, Title: prod.Title, Stock: prod.Stock, Limit: prod.PerUserLimit}
	if d.Title == "" {
		d.Title = prod.ID
	}
	if prod.PriceCents > 0 {
		d.Price = price(prod.PriceCents, prod.Currency)
	}
	if !prod.StartsAt.IsZero() {
		d.StartsMS = prod.StartsAt.UnixMilli()
	}
	if !prod.EndsAt.IsZero() {
		d.EndsMS = prod.EndsAt.UnixMilli()
	}
	return d
}

func (p *Pages) render(d productData) ([]byte, error) {
	var b bytes.Buffer
	err := p.tmpl.ExecuteTemplate(&b, "product.html", d)
	return b.Bytes(), err
}

// Publish writes the sale page of each product in ids to
// dir/products/ID.html, and the pages' scripts and styles to dir/static/,
// for an edge to serve them as files (deploy/nginx.sh --pages): the
// coordinators then answer only the live numbers the pages poll. A file
// is rewritten only when its content changed, through a rename, so the
// edge never serves half a page.
//
// (RunPublish publishes every PublishEvery.)
func (p *Pages) Publish(ctx context.Context, dir string, ids []string) error {
	for _, sub := range []string{"products", "static"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	for _, name := range []string{"sale.js", "work.js", "index.js", "style.css"} {
		b, err := web.ReadFile("web/" + name)
		if err != nil {
			return err
		}
		if err := writeIfChanged(filepath.Join(dir, "static", name), b); err != nil {
			return err
		}
	}
	for _, id := range ids {
		prod, err := p.catalog.Product(ctx, id)
		if err != nil {
			continue // gone, or the catalog cannot answer now: the next round
		}
		page, err := p.page(prod)
		if err != nil {
			return err
		}
		if err := writeIfChanged(filepath.Join(dir, "products", id+".html"), page); err != nil {
			return err
		}
	}
	return nil
}

func writeIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// PublishEvery is how often RunPublish writes the pages: a page a buyer
// opens is at most this much older than the sale.
const PublishEvery = 2 * time.Second

// RunPublish publishes the pages of the products ids lists to dir every
// PublishEvery until ctx ends. A failure is logged once until it passes,
// and tried again.
func (p *Pages) RunPublish(ctx context.Context, dir string, ids func(context.Context) ([]string, error), log *slog.Logger) {
	t := time.NewTicker(PublishEvery)
	defer t.Stop()
	failing := false
	for {
		list, err := ids(ctx)
		if err == nil {
			err = p.Publish(ctx, dir, list)
		}
		if err != nil && !failing && ctx.Err() == nil {
			log.Warn("could not publish the sale pages; will retry", "dir", dir, "err", err)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
