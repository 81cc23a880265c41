// Package deploy_test tests what deploy/ ships beyond the scripts the
// other packages' tests start: the OCI image (deploy/image.sh) and the
// Helm chart (deploy/helm/shardstock).
package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock/shard/shardtest"
)

// imageUID is the user deploy/image.sh builds the image to run as.
const imageUID = "65532"

// TestImageRunsACoordinator builds the image with deploy/image.sh, starts a
// coordinator from it with deploy/image.sh run (podman, the host's network)
// on the test's own Redis masters (with their ACL, so the URLs carry a
// password), and checks what the image promises: the probes answer, a
// product defined through the admin API sells its one unit and then
// answers sold out, the order is written to the SQLite database on /data,
// the sale page (embedded) is served, the process runs as uid 65532 with
// no capabilities, the image holds the binary and its few files and no
// shell, and SIGTERM stops it cleanly.
func TestImageRunsACoordinator(t *testing.T) {
	imgRequireTools(t, "buildah", "podman", "go")
	r := shardtest.StartWith(t, 3, shardtest.Options{ACLUser: "shardstock:image-test-pw"})
	root := shardtest.RepoRoot(t)
	// Names of this run only: tests of several checkouts may share the
	// host's podman storage, and -count=N runs this test N times.
	suffix := fmt.Sprintf("test-%d-%d", os.Getpid(), rand.Uint32())
	tag, name := "localhost/shardstock:"+suffix, "shardstock-"+suffix

	t0 := time.Now()
	out := imgRun(t, nil, "bash", filepath.Join(root, "deploy", "image.sh"), "build", "--tag", tag)
	t.Cleanup(func() { imgQuiet("podman", "rmi", "--force", tag) })
	id := imgLastLine(out)
	if len(id) != 64 {
		t.Fatalf("image.sh build printed %q, want the image's ID", out)
	}
	t.Logf("built %s (%s) in %v", tag, id[:12], time.Since(t0).Round(time.Millisecond))

	// The image's own configuration: a non-root numeric user, the
	// environment of API.md that a container needs, the data on /data.
	var cfgs []struct {
		Config struct {
			User       string
			Env        []string
			Entrypoint []string
			Cmd        []string
			StopSignal string
		}
	}
	imgJSON(t, imgRun(t, nil, "podman", "image", "inspect", tag), &cfgs)
	if len(cfgs) != 1 {
		t.Fatalf("podman image inspect: %d images", len(cfgs))
	}
	cfg := cfgs[0]
	if cfg.Config.User != imageUID+":"+imageUID {
		t.Errorf("image user %q, want %s:%s", cfg.Config.User, imageUID, imageUID)
	}
	for _, e := range []string{"SHARDSTOCK_HTTP_ADDR=0.0.0.0:8080", "SHARDSTOCK_DB=sqlite:/data/orders.db", "SHARDSTOCK_SPOOL_DIR=/data/spool"} {
		if !slices.Contains(cfg.Config.Env, e) {
			t.Errorf("image env %q lacks %s", cfg.Config.Env, e)
		}
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/shardstock"}) || !slices.Equal(cfg.Config.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q cmd %q", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	imgCheckFiles(t, tag)

	// No shell to run: the image is the binary.
	if out, err := exec.Command("podman", imgPodmanRunArgs("--rm", "--entrypoint", "/bin/sh", tag, "-c", "true")...).CombinedOutput(); err == nil {
		t.Errorf("/bin/sh ran in the image: %s", out)
	}

	// A coordinator from the image, on the host's network. It listens on
	// loopback only (image.sh's default there, on a free port instead of
	// 8080, which a `make run` on this host may hold) and believes
	// X-User-ID from loopback, where the test is.
	port := shardtest.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const token = "image-test-admin-token-0123456789"
	paySecret := strings.Repeat("p", 32)
	env := []string{
		"SHARDSTOCK_SHARDS=" + strings.Join(r.URLs(), ","),
		"SHARDSTOCK_ADMIN_TOKEN=" + token,
		"SHARDSTOCK_PAYMENT_SECRET=" + paySecret,
	}
	volume := name + "-data"
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Logf("podman logs %s:\n%s", name, out)
		}
		imgQuiet("podman", "rm", "--force", "--time", "0", name)
		imgQuiet("podman", "volume", "rm", "--force", volume)
		imgQuiet("bash", filepath.Join(root, "deploy", "image.sh"), "stop", "--name", name) // (its podman secrets, with no container left)
	})
	imgRun(t, env, "bash", filepath.Join(root, "deploy", "image.sh"), "run", "--tag", tag, "--name", name, "--volume", volume, "--port", fmt.Sprint(port))

	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := imgWaitFor(t, base+path, 200, 30*time.Second); status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
	}
	imgKeepsToItself(t, name, port, token, paySecret, r.URLs()[0])
	if status, body := imgDo(t, "GET", base+"/", "", nil); status != 200 || !strings.Contains(strings.ToLower(body), "<html") {
		t.Errorf("GET / (the embedded sale page): %d %.200s", status, body)
	}

	admin := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	if status, body := imgDo(t, "PUT", base+"/admin/v1/products/lamp", `{"stock":1,"per_user_limit":1}`, admin); status != 201 {
		t.Fatalf("PUT product: %d %s", status, body)
	}
	status, body := imgDo(t, "POST", base+"/api/v1/products/lamp/purchase", "", map[string]string{"X-User-ID": "alice"})
	if status != 200 {
		t.Fatalf("alice's purchase: %d %s", status, body)
	}
	var reserved struct {
		Status  string
		OrderID string `json:"order_id"`
	}
	imgJSON(t, body, &reserved)
	if reserved.Status != "reserved" || reserved.OrderID == "" {
		t.Fatalf("alice's purchase: %s", body)
	}
	status, body = imgDo(t, "POST", base+"/api/v1/products/lamp/purchase", "", map[string]string{"X-User-ID": "bob"})
	if status != 410 || !strings.Contains(body, `"sold_out"`) {
		t.Fatalf("bob's purchase of the sold unit: %d %s, want 410 sold_out", status, body)
	}
	// The order row is written to SQLite on /data: the volume is the
	// image's user's to write.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body = imgDo(t, "GET", base+"/api/v1/orders/"+reserved.OrderID, "", map[string]string{"X-User-ID": "alice"})
		if strings.Contains(body, `"awaiting_payment"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's order never written: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The running process: uid 65532 in every slot, no capabilities, no
	// way to gain privileges.
	pid := strings.TrimSpace(imgRun(t, nil, "podman", "inspect", "--format", "{{.State.Pid}}", name))
	st := imgStatus(t, pid)
	if got := strings.Fields(st["Uid"]); len(got) != 4 || slices.ContainsFunc(got, func(u string) bool { return u != imageUID }) {
		t.Errorf("container process uids %q, want %s", st["Uid"], imageUID)
	}
	if got := strings.Fields(st["Gid"]); len(got) != 4 || slices.ContainsFunc(got, func(u string) bool { return u != imageUID }) {
		t.Errorf("container process gids %q, want %s", st["Gid"], imageUID)
	}
	for _, c := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if st[c] != "0000000000000000" {
			t.Errorf("container process %s = %s, want none", c, st[c])
		}
	}
	if st["NoNewPrivs"] != "1" {
		t.Errorf("container process NoNewPrivs = %q", st["NoNewPrivs"])
	}
	if top := imgRun(t, nil, "podman", "top", name, "user", "huser", "args"); !strings.Contains(top, imageUID) {
		t.Errorf("podman top:\n%s", top)
	}

	// SIGTERM: the coordinator drains and exits 0 (image.sh stop fails
	// otherwise) well within its 30 s.
	t0 = time.Now()
	imgRun(t, nil, "bash", filepath.Join(root, "deploy", "image.sh"), "stop", "--name", name)
	if took := time.Since(t0); took > 20*time.Second {
		t.Errorf("stop took %v: SIGTERM was not heeded", took)
	}
}

// imgCheckFiles lists the image's file system (podman image mount) and
// checks it holds exactly what image.sh puts in: no shell, no other
// program, /data the image user's and private, /tmp sticky.
func imgCheckFiles(t *testing.T, tag string) {
	t.Helper()
	mnt := strings.TrimSpace(imgRun(t, nil, "podman", "image", "mount", tag))
	t.Cleanup(func() { imgQuiet("podman", "image", "unmount", tag) })
	var files []string
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(mnt, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/shardstock"}
	if !slices.Equal(files, want) {
		t.Errorf("image files %q, want only %q", files, want)
	}
	for _, sh := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
		if _, err := os.Lstat(filepath.Join(mnt, sh)); err == nil {
			t.Errorf("the image has %s", sh)
		}
	}
	if out, _ := exec.Command("stat", "-c", "%u:%g %a", filepath.Join(mnt, "data"), filepath.Join(mnt, "tmp")).Output(); string(out) != imageUID+":"+imageUID+" 700\n0:0 1777\n" {
		t.Errorf("/data and /tmp: %q, want the image user's 0700 and root's 1777", out)
	}
	// The binary is static: scratch has no loader.
	if out, err := exec.Command("file", filepath.Join(mnt, "usr/local/bin/shardstock")).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Errorf("the binary is not static: %s", out)
	}
}

// imgPodmanRunArgs are `podman run` arguments with the workarounds image.sh
// run applies on a sandboxed host (its hybrid cgroups and fixed limits).
func imgPodmanRunArgs(args ...string) []string {
	a := []string{"run", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=64:64"}
	if imgIsFS("/sys/fs/cgroup", "tmpfs") && imgIsFS("/sys/fs/cgroup/unified", "cgroup2fs") {
		if _, err := exec.LookPath("runc"); err == nil {
			a = append(a, "--runtime", "runc")
		}
	}
	return append(a, args...)
}

func imgIsFS(path, typ string) bool {
	out, err := exec.Command("stat", "-f", "-c", "%T", path).Output()
	return err == nil && strings.TrimSpace(string(out)) == typ
}

// imgStatus is /proc/PID/status by field.
func imgStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("the container's process: %v", err)
	}
	defer f.Close()
	st := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st
}

// imgRequireTools skips the test without one of tools, or fails it under
// make test (SHARDSTOCK_TEST_REQUIRE_ALL=1), which installs them: there no
// test may pass by skipping. Building and running images needs root here
// (podman's rootful storage and host network).
func imgRequireTools(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 && os.Geteuid() == 0 {
		return
	}
	msg := fmt.Sprintf("%s not installed: deploy/image.sh install (make test installs them)", strings.Join(missing, ", "))
	if len(missing) == 0 {
		msg = "building and running the image needs root (podman's system storage)"
	}
	if os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL") == "1" {
		t.Fatal(msg + "; SHARDSTOCK_TEST_REQUIRE_ALL=1 (make test) requires every tool")
	}
	t.Skip(msg)
}

// imgRun runs a command with env added to the test's, failing the test on
// an error; it returns the standard output.
func imgRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// imgQuiet runs a clean-up command whose failure (nothing to remove) does
// not matter.
func imgQuiet(name string, args ...string) { _ = exec.Command(name, args...).Run() }

func imgLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func imgJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v in %.300s", err, s)
	}
}

var imgClient = &http.Client{Timeout: 10 * time.Second}

func imgDo(t *testing.T, method, url, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := imgClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// imgWaitFor polls url until it answers want, or the time is up; it
// returns the last answer (0 while nothing listens).
func imgWaitFor(t *testing.T, url string, want int, within time.Duration) (int, string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := imgClient.Get(url)
		status, body := 0, ""
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = resp.StatusCode, string(b)
		} else {
			body = err.Error()
		}
		if status == want || time.Now().After(deadline) {
			return status, body
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// imgKeepsToItself (issue 41, finding 7): a container on the host's
// network listened on every interface of the host (/metrics, /edge/limits
// and /openapi.yaml answered from its other addresses), and every secret
// was in `podman inspect` and the container's OCI configuration. It
// listens on loopback only, and the secrets (the admin token, the payment
// key, the shards' URLs with their passwords) are in neither.
func imgKeepsToItself(t *testing.T, name string, port int, secrets ...string) {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.IsLoopback() || ip.IP.To4() == nil {
			continue
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.IP.String(), fmt.Sprint(port)), time.Second)
		if err == nil {
			c.Close()
			t.Errorf("the coordinator answers on the host's address %s: it should listen on loopback only", ip.IP)
		}
	}
	inspect := imgRun(t, nil, "podman", "inspect", name)
	oci := ""
	if dir := strings.TrimSpace(imgRun(t, nil, "podman", "inspect", "--format", "{{.StaticDir}}", name)); dir != "" {
		b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		oci = string(b)
	}
	if oci == "" {
		t.Error("no OCI configuration found for the container: nothing checked there")
	}
	for i, s := range secrets {
		if strings.Contains(inspect, s) {
			t.Errorf("secret %d is in podman inspect", i)
		}
		if strings.Contains(oci, s) {
			t.Errorf("secret %d is in the container's OCI configuration", i)
		}
	}
}
