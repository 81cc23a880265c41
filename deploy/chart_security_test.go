package deploy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardstock/shardstock/shard/shardtest"
)

// The parts of a rendered NetworkPolicy the checks read.
type (
	npSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	npPeer struct {
		PodSelector       *npSelector            `yaml:"podSelector"`
		NamespaceSelector *npSelector            `yaml:"namespaceSelector"`
		IPBlock           *struct{ CIDR string } `yaml:"ipBlock"`
	}
	npRule struct {
		From, To []npPeer
		Ports    []struct {
			Port     int
			Protocol string
		}
	}
	networkPolicy struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			PodSelector     npSelector `yaml:"podSelector"`
			PolicyTypes     []string   `yaml:"policyTypes"`
			Ingress, Egress []npRule
		}
	}
	// npPod is a peer: a pod (namespace and labels) or, with no namespace,
	// an address outside the cluster.
	npPod struct {
		ns     string
		labels map[string]string
	}
)

func (o networkPolicy) kind() string { return o.Kind }

// TestTheChartsNetworkPoliciesAllowOnlyTheFlowsASaleNeeds (issue 41,
// finding 6): any pod reached the coordinators (/metrics, /edge/limits, the
// admin API behind its token) and the Redis masters. The rendered
// NetworkPolicies, read as a cluster that enforces them would (policies add
// up; a pod no policy selects is open), allow buyers -> edge ->
// coordinators -> shards and the order database, Prometheus ->
// coordinators, DNS, and nothing else. (No cluster runs here: the test
// checks the policies' meaning, not a network plugin.)
func TestTheChartsNetworkPoliciesAllowOnlyTheFlowsASaleNeeds(t *testing.T) {
	helm := helmBinary(t)
	chart := filepath.Join(shardtest.RepoRoot(t), "deploy", "helm", "shardstock")
	const ns = "sale"
	policies := helmDecode[networkPolicy](t, helmTemplate(t, helm, chart, "--namespace", ns))
	var nps []networkPolicy
	for _, p := range policies {
		if p.Kind == "NetworkPolicy" {
			nps = append(nps, p)
		}
	}
	part := func(c string) npPod {
		return npPod{ns, map[string]string{"app.kubernetes.io/instance": "shardstock", "app.kubernetes.io/name": "shardstock", "app.kubernetes.io/component": c}}
	}
	// A sibling subchart of the same release (a database, say) shares the
	// instance label and not the chart's name: no policy of ours is its.
	sibling := npPod{ns, map[string]string{"app.kubernetes.io/instance": "shardstock", "app.kubernetes.io/name": "mariadb"}}
	pods := map[string]npPod{
		"edge":                          part("edge"),
		"coordinator":                   part("coordinator"),
		"shard":                         part("shard"),
		"another pod":                   {ns, map[string]string{"app": "other"}},
		"a pod in another namespace":    {"elsewhere", map[string]string{"app": "other"}},
		"prometheus":                    {"monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}},
		"dns":                           {"kube-system", map[string]string{"k8s-app": "kube-dns"}},
		"a sibling subchart's database": sibling,
		"a sibling subchart's pod":      sibling,
		"a buyer":                       {},
		"the database":                  {},
		"the internet":                  {},
	}
	flows := []struct {
		from, to string
		port     int
		want     bool
		udp      bool
	}{
		{"a buyer", "edge", 8080, true, false},
		{"another pod", "edge", 8080, true, false}, // (anyone may buy)
		{"edge", "coordinator", 8080, true, false},
		{"edge", "dns", 53, true, false},
		{"edge", "dns", 53, true, true},
		{"coordinator", "dns", 53, true, true},
		{"coordinator", "a sibling subchart's database", 3306, true, false},
		{"a sibling subchart's pod", "a sibling subchart's database", 3306, true, false},
		{"a sibling subchart's pod", "shard", 6379, false, false},
		{"edge", "shard", 6379, false, false},
		{"edge", "the database", 3306, false, false},
		{"edge", "the internet", 443, false, false},
		{"coordinator", "shard", 6379, true, false},
		{"coordinator", "the database", 3306, true, false},
		{"coordinator", "dns", 53, true, false},
		{"coordinator", "coordinator", 8080, false, false},
		{"coordinator", "the internet", 443, false, false},
		{"prometheus", "coordinator", 8080, true, false},
		{"prometheus", "shard", 6379, false, false},
		{"another pod", "coordinator", 8080, false, false},
		{"another pod", "shard", 6379, false, false},
		{"a pod in another namespace", "coordinator", 8080, false, false},
		{"a pod in another namespace", "shard", 6379, false, false},
		{"a buyer", "coordinator", 8080, false, false},
		{"a buyer", "shard", 6379, false, false},
		{"shard", "coordinator", 8080, false, false},
		{"shard", "the internet", 443, false, false},
	}
	wrong := 0
	for _, f := range flows {
		proto := map[bool]string{false: "TCP", true: "UDP"}[f.udp]
		if got := npAllowed(nps, ns, pods[f.from], pods[f.to], f.port, proto); got != f.want {
			wrong++
			t.Errorf("%s -> %s:%d/%s allowed %v, want %v", f.from, f.to, f.port, proto, got, f.want)
		}
	}
	t.Logf("%d NetworkPolicies; %d of %d flows as a sale needs them", len(nps), len(flows)-wrong, len(flows))
	// Off, the chart renders none (a cluster without a plugin that enforces them).
	for _, p := range helmDecode[networkPolicy](t, helmTemplate(t, helm, chart, "--set", "networkPolicy.enabled=false")) {
		if p.Kind == "NetworkPolicy" {
			t.Errorf("networkPolicy.enabled=false rendered %s", p.Metadata.Name)
		}
	}
}

// npAllowed says whether traffic (proto TCP or UDP) from one peer to
// another's port is allowed by the policies (all in namespace ns): the
// destination's ingress and the source's egress must both let it through.
func npAllowed(nps []networkPolicy, ns string, from, to npPod, port int, proto string) bool {
	return npLets(nps, ns, "Ingress", to, from, port, proto) && npLets(nps, ns, "Egress", from, to, port, proto)
}

// npLets: does every policy of kind (Ingress or Egress) that selects pod
// leave it open, or does one of their rules admit the peer on port?
func npLets(nps []networkPolicy, ns, kind string, pod, peer npPod, port int, proto string) bool {
	if pod.ns == "" {
		return true // outside the cluster: no policy applies
	}
	selected := false
	for _, p := range nps {
		if pod.ns != ns || !npMatches(p.Spec.PodSelector, pod.labels) || !strings.Contains(strings.Join(p.Spec.PolicyTypes, " "), kind) {
			continue
		}
		selected = true
		rules := p.Spec.Ingress
		if kind == "Egress" {
			rules = p.Spec.Egress
		}
		for _, r := range rules {
			peers := r.From
			if kind == "Egress" {
				peers = r.To
			}
			portOK := len(r.Ports) == 0
			for _, rp := range r.Ports {
				portOK = portOK || (rp.Port == port && (rp.Protocol == proto || rp.Protocol == "" && proto == "TCP"))
			}
			peerOK := len(peers) == 0
			for _, pe := range peers {
				peerOK = peerOK || npPeerMatches(pe, ns, peer)
			}
			if portOK && peerOK {
				return true
			}
		}
	}
	return !selected
}

// npPeerMatches: does a policy's peer (in namespace ns) name pod?
func npPeerMatches(pe npPeer, ns string, pod npPod) bool {
	if pod.ns == "" {
		return pe.IPBlock != nil // (the chart's peers are pods; an ipBlock would be an address)
	}
	if pe.IPBlock != nil {
		return false
	}
	if pe.NamespaceSelector == nil {
		if pod.ns != ns {
			return false
		}
	} else if !npMatches(*pe.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": pod.ns}) {
		return false
	}
	return pe.PodSelector == nil || npMatches(*pe.PodSelector, pod.labels)
}

func npMatches(sel npSelector, labels map[string]string) bool {
	for k, v := range sel.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestTheChartsEdgeBoundsHalfSentConnections (issue 41, finding 6): the
// chart's edge had no stream proxy, so one address held 3,000 of 3,000
// half-sent requests open (http's limit_conn counts a connection only once
// its headers are read). The chart's own nginx.conf, run by nginx here
// (Debian's, its stream module loaded; the coordinators' Service replaced
// by a stand-in), closes every connection past edge.openConnsPerIP at once.
func TestTheChartsEdgeBoundsHalfSentConnections(t *testing.T) {
	helm := helmBinary(t)
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		nginx = "/usr/sbin/nginx"
	}
	if _, err := os.Stat(nginx); err != nil {
		if os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL") == "1" {
			t.Fatal("nginx is not installed (deploy/nginx.sh install), and make test requires it")
		}
		t.Skip("nginx is not installed: deploy/nginx.sh install")
	}
	chart := filepath.Join(shardtest.RepoRoot(t), "deploy", "helm", "shardstock")
	const bound = 80
	var conf string
	for _, o := range helmDecode[helmConfigMap](t, helmTemplate(t, helm, chart, "--set", fmt.Sprintf("edge.openConnsPerIP=%d", bound), "--set", "edge.connsPerIP=20")) {
		if o.Kind == "ConfigMap" && o.Metadata.Name == "shardstock-edge" {
			conf = o.Data["nginx.conf"]
		}
	}
	if !strings.Contains(conf, "http {") {
		t.Fatalf("no nginx.conf in the edge's ConfigMap:\n%s", conf)
	}
	var forwardedFor sync.Map // path -> the X-Forwarded-For the coordinator got
	coordinator := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwardedFor.Store(r.URL.Path, r.Header.Get("X-Forwarded-For"))
		w.Write([]byte("ok"))
	}))
	defer coordinator.Close()
	dir := t.TempDir()
	freeAddr := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	addr, health := freeAddr(), freeAddr()
	// What only the pod has: its /tmp, its port, the Service's name, and
	// the official image's nginx with the stream module built in (Debian
	// loads it) running as one user.
	conf = strings.ReplaceAll(conf, "/tmp/", dir+"/")
	conf = strings.Replace(conf, "listen 8080;", "listen "+addr+";", 1)
	conf = strings.Replace(conf, "listen 8081;", "listen "+health+";", 1)
	conf = regexp.MustCompile(`server \S+\.svc:8080;`).ReplaceAllString(conf, "server "+strings.TrimPrefix(coordinator.URL, "http://")+";")
	conf = "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\nuser root;\n" + conf
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// Its output to a file: its workers would hold a pipe open past the
	// master. SIGTERM makes the master stop them and exit.
	logf, err := os.Create(filepath.Join(dir, "nginx.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	out := func() string { b, _ := os.ReadFile(filepath.Join(dir, "nginx.out")); return string(b) }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/api/v1/anything")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart's edge did not answer: %v\n%s", err, out())
		}
	}
	const n = 1000
	got := shardtest.SendHalfSent(t, addr, n, 3*time.Second, func() {
		// Another address is served meanwhile.
		resp, err := shardtest.ClientFrom("127.0.0.2").Get("http://" + addr + "/api/v1/another")
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("another address while one holds half-sent requests: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		// The kubelet's probes, on a port of their own, answer too.
		if resp, err := http.Get("http://" + health + "/_edge/healthz"); err != nil || resp.StatusCode != 200 {
			t.Errorf("the health port while one address holds half-sent requests: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	})
	if got, _ := forwardedFor.Load("/api/v1/another"); got != "127.0.0.2" {
		t.Errorf("the coordinator got X-Forwarded-For %q through the chart's edge, want the client's 127.0.0.2", got)
	}
	t.Logf("the chart's edge, within 3s: %d closed (the slowest after %s), %d held, %d answered",
		got.Closed, got.Slowest.Round(time.Millisecond), got.Held, got.Answered)
	if got.Held > bound || got.Closed < n-bound {
		t.Fatalf("one address held %d half-sent requests and %d were closed, want at most %d held and the rest closed at once",
			got.Held, got.Closed, bound)
	}
}

type helmConfigMap struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
}

func (o helmConfigMap) kind() string { return o.Kind }
