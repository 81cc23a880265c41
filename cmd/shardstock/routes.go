package main

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/report"
	"github.com/shardstock/shardstock/waitroom"
)

// routes is the server's handler: purchases in front of echo's router.
func (m *Main) routes() http.Handler {
	return api.LimitHeaders(maxHeaderBytes, m.buyers.Purchases(m.router()))
}

// maxHeaderBytes bounds a request's headers (431 in the API's JSON).
// net/http reads up to four times as much before it answers 431 itself,
// in plain text: only headers over 64 KiB get that answer.
const maxHeaderBytes = 16 << 10

// router is every route on echo, with its middleware.
func (m *Main) router() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = api.ErrorHandler(m.log)
	e.JSONSerializer = api.JSONSerializer{}
	// Client IPs (per-IP limits, logs): X-Forwarded-For is believed only
	// from SHARDSTOCK_TRUSTED_PROXIES (an nginx edge), so a buyer cannot
	// pick the IP it is limited as.
	e.IPExtractor = m.realIP()
	// X-Request-ID, in the canonical form that needs no copy per request.
	requestID := middleware.RequestIDConfig{Generator: api.RequestIDs(), TargetHeader: "X-Request-Id"}
	// A request id is the server's own: one a client sends is dropped, so
	// it cannot pass for one of ours in the logs.
	e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Request().Header.Del(echo.HeaderXRequestID)
			return next(c)
		}
	})
	e.Use(middleware.Recover(), middleware.RequestIDWithConfig(requestID), api.RequestLog(m.log),
		middleware.SecureWithConfig(middleware.SecureConfig{ContentTypeNosniff: "nosniff", XFrameOptions: "DENY",
			ReferrerPolicy: "same-origin",
			ContentSecurityPolicy: "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
				"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"}))

	m.mount(e)
	api.AnswerMethodNotAllowed(e)
	return e
}

// mount lists every route the server answers, with who may call it: the
// one place to look for a URL's handler. The JSON API's paths are api's
// (api/routes.go), which package client calls; api/openapi.yaml describes
// the same routes (TestOpenAPIMatchesTheRoutes checks both ways).
func (m *Main) mount(e *echo.Echo) {
	buyers, pages := m.buyers, m.pages
	orders := order.Handlers{Orders: m.orders, Callbacks: m.orders, Identity: m.identity()}
	inv := m.inv.handlers()
	queue := waitroom.Handlers{Rooms: m.room, Identity: m.identity()}
	rep := report.Handler{Store: m.store.Reports, Products: m.inv.catalog, Orders: m.store.Orders.CountByStatus}

	// Buyers, identified as SHARDSTOCK_USER_AUTH says (an HS256 token, or
	// X-User-ID from SHARDSTOCK_TRUSTED_PROXIES). Purchases are served in front of echo
	// (flashsale.Handler.Purchases); the route keeps the router complete.
	e.POST(api.PurchasePath, buyers.PostPurchase)
	e.GET(api.TicketPath, buyers.GetTicket)
	e.GET(api.StockPath, inv.GetStock)
	e.GET(api.OrderPath, orders.Get, buyers.LimitBuyer) // (order calls cost the buyer's tokens, as purchases do)
	e.POST(api.PayPath, orders.PostPay)                 // (signed: the payment centre is not held to a buyer's rate)
	e.POST(api.CancelPath, orders.PostCancel, buyers.LimitBuyer)
	e.POST(api.QueuePath, queue.PostQueue, buyers.LimitBuyer)
	e.GET(api.QueuePath, queue.GetQueue, buyers.LimitLooks)

	// Pages, for anyone; the operators' page reads the admin API.
	e.GET("/", pages.Index)
	e.GET("/products/:id", pages.Product)
	e.GET("/static/*", pages.Static)
	e.GET("/admin/", pages.Admin)
	e.GET("/admin", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/admin/") })

	// The nginx edge's limits (deploy/nginx/limiter.lua).
	e.GET("/edge/limits", buyers.GetEdgeLimits)

	// Operators: the admin API, behind SHARDSTOCK_ADMIN_TOKEN.
	admin := e.Group(api.AdminBase, api.AdminAuth(m.cfg.AdminToken))
	admin.GET(api.AdminProductsPath, inv.GetProducts)
	admin.PUT(api.AdminProductPath, inv.PutProduct)
	admin.GET(api.AdminProductPath, inv.GetProduct)
	admin.PATCH(api.AdminProductPath, inv.PatchProduct)
	admin.POST(api.AdminPausePath, inv.PostPause)
	admin.POST(api.AdminResumePath, inv.PostResume)
	admin.POST(api.AdminStockPath, inv.PostStock)
	admin.POST(api.AdminArchivePath, inv.PostArchive)
	admin.POST(api.AdminRebalancePath, inv.PostRebalance)
	admin.GET(api.AdminReconcilePath, inv.GetReconcile)
	admin.POST(api.AdminReconcilePath, inv.PostReconcile)
	admin.GET(api.AdminReportPath, rep.GetReport)
	admin.GET(api.AdminChartPath, rep.GetChart)
	admin.GET(api.AdminSessionsPath, inv.GetSessions)
	admin.PUT(api.AdminSessionPath, inv.PutSession)
	admin.GET(api.AdminSessionPath, inv.GetSession)
	admin.DELETE(api.AdminSessionPath, inv.DeleteSession)
	admin.GET(api.AdminShardsPath, inv.GetShards)
	admin.POST(api.AdminDrainPath, inv.PostDrain)
	admin.POST(api.AdminResyncPath, inv.PostResync)
	admin.GET(api.AdminSpoolPath, m.getSpool)
	admin.GET(api.AdminQueuesPath, queue.GetQueues)
	admin.PUT(api.AdminQueuePath, queue.PutQueue)
	admin.GET(api.AdminQueuePath, queue.GetAdminQueue)
	admin.POST(api.AdminQueuePausePath, queue.PostPause)
	admin.POST(api.AdminQueueResumePath, queue.PostResume)
	admin.POST(api.AdminQueueAdvancePath, queue.PostAdvance)
	admin.POST(api.AdminQueueRevokePath, queue.PostRevoke)

	// Profiles during a sale, behind the admin token:
	// go tool pprof -http=: -H "Authorization: Bearer $TOKEN" http://HOST/admin/debug/pprof/profile?seconds=20
	debug := e.Group("/admin/debug/pprof", api.AdminAuth(m.cfg.AdminToken))
	debug.GET("/", echo.WrapHandler(http.HandlerFunc(pprof.Index)))
	debug.GET("/cmdline", echo.WrapHandler(http.HandlerFunc(pprof.Cmdline)))
	debug.GET("/profile", echo.WrapHandler(http.HandlerFunc(pprof.Profile)))
	debug.GET("/symbol", echo.WrapHandler(http.HandlerFunc(pprof.Symbol)))
	debug.GET("/trace", echo.WrapHandler(http.HandlerFunc(pprof.Trace)))
	debug.GET("/:name", func(c echo.Context) error {
		pprof.Handler(c.Param("name")).ServeHTTP(c.Response(), c.Request())
		return nil
	})

	// Probes, metrics and the contract, for the platform.
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", m.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})))
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", api.OpenAPI) })
}

// spoolView is GET /admin/v1/spool: this coordinator's spool.
type spoolView struct {
	Enabled bool      `json:"enabled"`
	Depth   int       `json:"depth"`              // purchases waiting for a shard to take them
	Oldest  time.Time `json:"oldest_at,omitzero"` // when the one waiting longest arrived
}

func (m *Main) getSpool(c echo.Context) error {
	v := spoolView{Enabled: m.spool != nil}
	if m.spool != nil {
		v.Depth, v.Oldest = m.spool.Waiting()
	}
	return c.JSON(http.StatusOK, v)
}

// cannotSell says why no shard can take a purchase now ("": one can): each
// is down (or refuses this coordinator's credentials, or its breaker is
// open), or fenced until it is back in line with the order table.
func (m *Main) cannotSell() string {
	var why []string
	for i, s := range m.health.Status() {
		switch {
		case !s.Up || s.Breaker == ha.Open:
			// (No error text: /readyz is public, and it names hosts;
			// GET /admin/v1/shards has it.)
			why = append(why, fmt.Sprintf("shard %d is down", i))
		case m.set.Fence.Fenced(i):
			why = append(why, fmt.Sprintf("shard %d is fenced until it is back in line with the order table", i))
		default:
			return ""
		}
	}
	return "no shard can sell: " + strings.Join(why, "; ")
}

// ready answers 200 when a shard can sell (cannotSell), else 503 saying
// why for each.
func (m *Main) ready(c echo.Context) error {
	if why := m.cannotSell(); why != "" {
		return c.JSON(http.StatusServiceUnavailable, api.ErrorBody{Error: "unavailable", Message: why})
	}
	if warning := m.clock.SkewWarning(); warning != "" {
		return c.JSON(http.StatusOK, map[string]any{"status": "ready", "clock_skew_seconds": m.clock.Skew().Seconds(), "warning": warning})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
