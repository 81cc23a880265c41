package flashsale

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
)

//go:embed web
var web embed.FS

// Sessions finds the session to show on the front page (order.Store).
type Sessions interface {
	CurrentSession(ctx context.Context, now time.Time) (*shardstock.Session, error)
}

// Pages serves the sale pages: the current session's products at /, one
// page per product at /products/{id} (rendered once and cached: a product's
// definition never changes), the operators' page at /admin/ and the static
// files. Live numbers come from the JSON APIs the pages poll.
type Pages struct {
	catalog  Catalog
	sessions Sessions
	now      func() time.Time
	tmpl     *template.Template
	mu       sync.Mutex        // guards rendered
	rendered map[string][]byte // product id -> page
}

// NewPages parses the embedded templates.
func NewPages(catalog Catalog, sessions Sessions, now func() time.Time) *Pages {
	if now == nil {
		now = time.Now
	}
	t := template.Must(template.ParseFS(web, "web/*.html"))
	return &Pages{catalog: catalog, sessions: sessions, now: now, tmpl: t, rendered: map[string][]byte{}}
}

// Register mounts the pages on e.
func (p *Pages) Register(e *echo.Echo) {
	static := assets{web}
	e.GET("/", p.index)
	e.GET("/products/:id", p.product)
	e.GET("/admin/", p.file("admin.html"))
	e.GET("/admin", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/admin/") })
	e.GET("/static/*", echo.WrapHandler(http.StripPrefix("/static/", http.FileServer(http.FS(static)))))
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

func (p *Pages) file(name string) echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := web.ReadFile("web/" + name)
		if err != nil {
			return err
		}
		return c.HTMLBlob(http.StatusOK, b)
	}
}

type indexData struct {
	Session  *shardstock.Session
	Products []*shardstock.Product
}

func (p *Pages) index(c echo.Context) error {
	ctx := c.Request().Context()
	s, err := p.sessions.CurrentSession(ctx, p.now())
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	d := indexData{Session: s}
	if s != nil {
		for _, id := range s.Products {
			if prod, err := p.catalog.Product(ctx, id); err == nil {
				d.Products = append(d.Products, prod)
			}
		}
	}
	var b bytes.Buffer
	if err := p.tmpl.ExecuteTemplate(&b, "index.html", d); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, b.Bytes())
}

type productData struct {
	ID, Title, Price string
	Stock, Limit     int64
	StartsMS, EndsMS int64
}

func (p *Pages) product(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNotFound
	}
	p.mu.Lock()
	page, ok := p.rendered[id]
	p.mu.Unlock()
	if !ok {
		prod, err := p.catalog.Product(c.Request().Context(), id)
		if err != nil {
			return err
		}
		if page, err = p.render(prod); err != nil {
			return err
		}
		p.mu.Lock()
		p.rendered[id] = page
		p.mu.Unlock()
	}
	return c.HTMLBlob(http.StatusOK, page)
}

func (p *Pages) render(prod *shardstock.Product) ([]byte, error) {
	d := productData{ID: prod.ID, Title: prod.Title, Stock: prod.Stock, Limit: prod.PerUserLimit}
	if d.Title == "" {
		d.Title = prod.ID
	}
	if prod.PriceCents > 0 {
		d.Price = fmt.Sprintf("%d.%02d", prod.PriceCents/100, prod.PriceCents%100)
	}
	if !prod.StartsAt.IsZero() {
		d.StartsMS = prod.StartsAt.UnixMilli()
	}
	if !prod.EndsAt.IsZero() {
		d.EndsMS = prod.EndsAt.UnixMilli()
	}
	var b bytes.Buffer
	err := p.tmpl.ExecuteTemplate(&b, "product.html", d)
	return b.Bytes(), err
}
