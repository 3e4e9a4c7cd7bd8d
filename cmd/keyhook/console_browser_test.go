package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/demo"
	"github.com/keyhook/keyhook/internal/testutil"
)

// Deadlines of the browser test: CI runs it on two loaded cores, so each
// wait is generous; none of them is a sleep.
const (
	browserWait  = 45 * time.Second
	browserTotal = 3 * time.Minute
)

// The record whose key and body would run script if they were ever
// parsed as HTML.
const (
	xssKey    = `<script>window.__xss=1;alert(1)</script>`
	xssBody   = `<img src=x onerror="window.__xss=2;alert(2)">`
	xssHeader = `<img src=x onerror="window.__xss=3;alert(3)">`
	// xssEcho is what the endpoint answers a test delivery with.
	xssEcho = `<b onclick=alert(4)>bold?</b>`
)

// chromium returns the browser to drive: KEYHOOK_CHROMIUM, else Debian's
// chromium. Without one the test is skipped, except under CI=true, which
// must run it (.ci/run installs the package).
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KEYHOOK_CHROMIUM"), "chromium", "chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := "chromium not found (apt-get install -y chromium, or set KEYHOOK_CHROMIUM)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: CI must run the browser test)")
	}
	t.Skip(msg)
	return ""
}

// flakyOnce is an endpoint that refuses, with 400, the first delivery of
// the XSS record (so it is dead-lettered) and accepts everything else; a
// test delivery gets xssEcho back.
type flakyOnce struct {
	mu        sync.Mutex
	refused   bool
	delivered int // deliveries of the XSS record accepted
}

func (f *flakyOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Keyhook-Test") == "true" {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, xssEcho)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if string(body) == xssBody {
		if !f.refused {
			f.refused = true
			http.Error(w, "refused once", http.StatusBadRequest)
			return
		}
		f.delivered++
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *flakyOnce) deliveredCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delivered
}

// TestConsoleInARealBrowser drives the console of a running keyhook dev
// in Chromium: log in with a token, see the demo subscription deliver,
// find the slow key holding a watermark and listed among the keys not
// flowing, pause and resume, see a record
// made of HTML as text, redrive it from its dead letter and see it
// delivered, and see a read-only token offered no action. With
// KEYHOOK_CONSOLE_SCREENSHOTS=1 it writes the README's screenshots to
// docs/console/.
func TestConsoleInARealBrowser(t *testing.T) {
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTotal)
	defer cancel()

	// keyhook dev, in this process.
	out := &syncBuffer{}
	devCtx, stopDev := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(devCtx, []string{"dev", "--http-addr", "127.0.0.1:0", "--log-level", "error"}, noEnv, out, io.Discard)
	}()
	defer func() {
		stopDev()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("dev did not stop")
		}
	}()
	banner := regexp.MustCompile(`kafka    (\S+) .*\n  redis    (\S+) .*\n  api      (http://\S+)\n(?s:.*)token    (kh_[A-Za-z0-9_-]{43}) \(admin\)`)
	var m []string
	testutil.WaitFor(t, browserWait, "keyhook dev prints its banner", func() bool {
		m = banner.FindStringSubmatch(out.String())
		return m != nil
	})
	brokers, redisAddr, base, admin := m[1], m[2], m[3], m[4]

	// A read-only token, made as an operator would.
	var tokOut bytes.Buffer
	if err := run(ctx, []string{"token", "create", "--name", "viewer", "--scopes", "subscriptions:read",
		"--redis-url", "redis://" + redisAddr, "--kafka-brokers", brokers}, noEnv, &tokOut, io.Discard); err != nil {
		t.Fatalf("token create: %v", err)
	}
	viewer := strings.TrimSpace(tokOut.String())

	client := &apiCaller{t: t, base: base}
	var demoID string
	testutil.WaitFor(t, browserWait, "the demo subscription exists", func() bool {
		var list struct {
			Items []struct{ ID, Name string } `json:"items"`
		}
		client.call(admin, "GET", "/v1/subscriptions", "", &list)
		for _, s := range list.Items {
			if s.Name == "demo" {
				demoID = s.ID
			}
		}
		return demoID != ""
	})

	// The XSS record, on a topic of its own, to an endpoint that refuses
	// it once.
	endpoint := &flakyOnce{}
	srv := httptest.NewServer(endpoint)
	defer srv.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := &kgo.Record{Topic: "console-xss", Key: []byte(xssKey), Value: []byte(xssBody),
		Headers: []kgo.RecordHeader{{Key: "note", Value: []byte(xssHeader)}}}
	if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	var xss struct{ ID string }
	if code := client.call(admin, "POST", "/v1/subscriptions", `{"name":"xss-probe","topics":["console-xss"],"endpoint":{"url":"`+srv.URL+`/hook"},"retry":{"max_attempts":1}}`, &xss); code != http.StatusCreated {
		t.Fatalf("create the xss subscription: %d", code)
	}

	// The browser.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)...)
	defer cancelAlloc()
	var dialogs atomic.Int32
	var errMu sync.Mutex
	var jsErrors []string
	// The listener runs on the tab's reading goroutine: it only counts.
	watch := chromedp.WithListener(func(ev any) {
		switch e := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			dialogs.Add(1)
		case *runtime.EventExceptionThrown:
			errMu.Lock()
			jsErrors = append(jsErrors, fmt.Sprintf("%s (%s:%d)", e.ExceptionDetails.Text, e.ExceptionDetails.URL, e.ExceptionDetails.LineNumber+1))
			if e.ExceptionDetails.Exception != nil {
				jsErrors = append(jsErrors, e.ExceptionDetails.Exception.Description)
			}
			errMu.Unlock()
		}
	})
	tab, cancelTab := chromedp.NewContext(allocCtx, watch)
	defer cancelTab()
	// The first Do starts the browser, which lives as long as the context
	// of that call: it gets the tab's own, never one with a deadline.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	shots := newScreenshots(t)
	b := &browserRun{t: t}

	// Log in with the admin token, typed and submitted with the keyboard.
	b.run(tab, "open the console", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.run(tab, "sign in", chromedp.SendKeys(chromedp.CSS("#token"), admin+"\r"))
	b.until(tab, "the subscriptions list shows the demo", `/^[0-9,]+$/.test(document.querySelector('#subs tr[data-sub-id=`+js(demoID)+`] td.acked')?.textContent ?? '')`)
	b.until(tab, "the token is in sessionStorage, not in the URL or a cookie",
		`sessionStorage.getItem('keyhook.token') === `+js(admin)+` && !location.href.includes(`+js(admin)+`) && document.cookie === ''`)

	// The demo delivers: its acked count grows. A keyboard user on its
	// link stays there while the rows are refreshed.
	acked := `Number(document.querySelector('#subs tr[data-sub-id=` + js(demoID) + `] td.acked').textContent.replace(/,/g, ''))`
	first := evaluate[int](b, tab, "read the acked count", acked)
	b.run(tab, "focus the demo's link", chromedp.Focus(chromedp.CSS(`#subs a[data-focus=`+js(demoID)+`]`)))
	b.until(tab, "the acked count grows", fmt.Sprintf(`%s > %d`, acked, first))
	b.until(tab, "the focus stays on the demo's link", `document.activeElement?.dataset.focus === `+js(demoID)+` && document.activeElement.isConnected`)
	shots.take(tab, "subscriptions.png")

	// The slow key holds a watermark, and the page says why.
	b.run(tab, "open the demo", chromedp.Click(chromedp.CSS(`#subs tr[data-sub-id=`+js(demoID)+`] a`)))
	b.until(tab, demo.SlowKey+" holds a watermark",
		`[...document.querySelectorAll('#holding tbody tr')].some(r => r.dataset.key === `+js(demo.SlowKey)+` && r.cells[4].textContent.startsWith('in flight'))`)
	// Every key not flowing is listed: the slow key, its records waiting
	// behind the one in flight.
	b.until(tab, demo.SlowKey+" is listed among the keys not flowing",
		`[...document.querySelectorAll('#keys tbody tr')].some(r => r.dataset.key === `+js(demo.SlowKey)+` && r.dataset.state === 'in_flight' && r.cells[2].textContent === 'waiting behind a record in flight' && Number(r.cells[8].textContent.replace(/,/g, '')) > 0)`)
	b.until(tab, "the rate chart has a line", `document.querySelector('svg.chart polyline') !== null`)
	if shots.dir != "" {
		b.until(tab, "the chart has a few samples to show", `document.querySelector('svg.chart polyline').points.numberOfItems >= 10`)
	}
	shots.full(tab, "subscription.png")

	// Pause and resume, from the buttons.
	b.run(tab, "pause", chromedp.Click(chromedp.CSS("#pause")))
	b.until(tab, "the page says paused", `document.querySelector('#state').textContent === 'paused' && document.querySelector('#pause').textContent === 'Resume'`)
	var sub struct{ Paused bool }
	client.call(admin, "GET", "/v1/subscriptions/"+demoID, "", &sub)
	if !sub.Paused {
		t.Errorf("after Pause the API says the demo is not paused")
	}
	b.run(tab, "resume", chromedp.Click(chromedp.CSS("#pause")))
	b.until(tab, "the page says active", `document.querySelector('#state').textContent === 'active'`)
	client.call(admin, "GET", "/v1/subscriptions/"+demoID, "", &sub)
	if sub.Paused {
		t.Errorf("after Resume the API says the demo is paused")
	}

	// The seek confirmation says what moves, and Cancel moves nothing.
	b.run(tab, "ask for a seek", chromedp.Click(chromedp.CSS("#seek")), chromedp.WaitVisible(chromedp.CSS("dialog #seek-preview")))
	b.until(tab, "the confirmation lists every partition", `document.querySelectorAll('#seek-preview li').length === 4 && document.querySelector('#seek-preview li').textContent.includes('skips')`)
	b.run(tab, "cancel the seek", chromedp.Click(chromedp.CSS("dialog #cancel")))
	b.until(tab, "the dialog is gone", `document.querySelector('dialog') === null`)

	// The XSS record is dead-lettered, shown as text, and redriven.
	b.run(tab, "open its dead letters", chromedp.Evaluate[chromedp.Void](`location.hash = '#/subscriptions/'+`+js(xss.ID)+`+'/dead-letters'`))
	b.until(tab, "the dead letter shows its key as text",
		`document.querySelector('#dead-letters tbody tr[data-id] td.key')?.textContent === `+js(xssKey))
	b.run(tab, "open its headers", chromedp.Click(chromedp.CSS(`#dead-letters tbody tr[data-id] summary`)))
	b.until(tab, "its header shows as text", `document.querySelector('#dead-letters dl.headers dd').textContent === `+js(xssHeader))
	b.run(tab, "open its value", chromedp.Click(chromedp.CSS(`#dead-letters tbody tr[data-id] summary[data-focus^="value "]`)))
	b.until(tab, "its value shows as text", `document.querySelector('#dead-letters pre.body')?.textContent === `+js(xssBody))
	shots.take(tab, "dead-letters.png")
	b.run(tab, "select it and redrive", chromedp.Click(chromedp.CSS(`#dead-letters tbody input[type=checkbox]`)),
		chromedp.Click(chromedp.CSS("#redrive-selected")), chromedp.Click(chromedp.CSS("dialog #confirm")))
	b.until(tab, "the console says it was queued", `document.querySelector('#redrive-result').textContent.startsWith('1 dead letter queued')`)
	testutil.WaitFor(t, browserWait, "the redriven record is delivered", func() bool { return endpoint.deliveredCount() == 1 })

	// A test delivery: the endpoint's answer, HTML too, is text.
	b.run(tab, "open the xss subscription", chromedp.Click(chromedp.CSS("#sub-link")))
	// Clicks land where the button was: wait until the page has its data
	// and stops moving.
	b.until(tab, "the xss subscription is shown", `document.querySelector('#state') !== null && document.querySelector('#partitions tbody tr') !== null`)
	b.run(tab, "send a test", chromedp.Click(chromedp.CSS("#send-test")))
	b.until(tab, "the test result shows the answer as text", `document.querySelector('#test-result pre')?.textContent === `+js(xssEcho))

	// A filter and a transform tried before they are saved.
	b.run(tab, "try a filter that rejects the test", chromedp.Click(chromedp.CSS("details.try summary")),
		chromedp.SetValue(chromedp.CSS("#test-filter"), "key == 'no-such-key'"), chromedp.Click(chromedp.CSS("#send-test")))
	b.until(tab, "the test says the filter rejects it", `document.querySelector('#test-filtered') !== null`)
	b.run(tab, "try a transform", chromedp.Evaluate[chromedp.Void](`document.querySelector('#test-filter').value = ''`),
		chromedp.SetValue(chromedp.CSS("#test-transform"), "{'shaped': true}"), chromedp.Click(chromedp.CSS("#send-test")))
	b.until(tab, "the test shows the transformed body sent", `document.querySelector('#test-body')?.textContent === '{"shaped":true}'`)

	// Nothing of it ran, or became an element.
	b.until(tab, "no script ran and no element was made from data",
		`window.__xss === undefined && document.querySelectorAll('main img, main b, main script').length === 0`)

	// Nodes, at 1280 px; then the subscription at a phone's width.
	b.run(tab, "open the nodes", chromedp.Click(chromedp.CSS(`#nav a[data-page=nodes]`)))
	b.until(tab, "the node lists what it owns", `[...document.querySelectorAll('#nodes tbody ul.owned li')].some(li => li.textContent.includes(`+js(demoID)+`))`)
	shots.take(tab, "nodes.png")
	if shots.dir != "" {
		b.run(tab, "phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)),
			chromedp.Evaluate[chromedp.Void](`location.hash = '#/subscriptions/'+`+js(demoID)))
		b.until(tab, "the demo shows on a phone", `document.querySelector('#partitions tbody tr') !== null && document.querySelector('#holding tbody tr') !== null`)
		shots.take(tab, "phone.png")
	}

	// A read-only token, handed in the fragment as keyhook console does,
	// in a tab of its own: no action anywhere, and the API refuses them.
	ro, cancelRO := chromedp.NewContext(tab, watch)
	defer cancelRO()
	if err := chromedp.Do(ro); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	b.run(ro, "open the console with the read-only token", chromedp.Navigate(base+"/console/#token="+viewer))
	b.until(ro, "it is signed in, read only, and the token left the URL",
		`document.querySelector('#who-name').textContent.includes('read only') && !location.href.includes('kh_') && sessionStorage.getItem('keyhook.token') === `+js(viewer))
	b.run(ro, "open the demo", chromedp.Evaluate[chromedp.Void](`location.hash = '#/subscriptions/'+`+js(demoID)))
	b.until(ro, "the demo shows without actions", `document.querySelector('#partitions tbody tr') !== null && document.querySelector('section.actions button, #pause, #seek, #send-test, #rotate') === null`)
	b.run(ro, "open the dead letters", chromedp.Evaluate[chromedp.Void](`location.hash = '#/subscriptions/'+`+js(xss.ID)+`+'/dead-letters'`))
	b.until(ro, "the dead letters show without redrive", `document.querySelector('#dead-letters tbody tr[data-id]') !== null && document.querySelector('#redrive-all, #redrive-selected, #dead-letters input[type=checkbox]') === null`)
	refused := evaluate[int](b, ro, "call pause with the read-only token",
		`fetch('/v1/subscriptions/'+`+js(demoID)+`+'/pause', {method: 'POST', headers: {Authorization: 'Bearer ' + sessionStorage.getItem('keyhook.token')}}).then(r => r.status)`,
		chromedp.EvalAwaitPromise)
	if refused != http.StatusForbidden {
		t.Errorf("POST pause with the read-only token = %d, want 403", refused)
	}

	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened: data ran as script", n)
	}
	errMu.Lock()
	defer errMu.Unlock()
	if len(jsErrors) > 0 {
		t.Errorf("the console threw:\n  %s", strings.Join(jsErrors, "\n  "))
	}
}

// browserRun runs chromedp actions, failing the test with what was being
// done.
type browserRun struct{ t *testing.T }

func (b *browserRun) run(ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	c, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// evaluate runs the JavaScript expression and returns its value.
func evaluate[T any](b *browserRun, ctx context.Context, what, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	c, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// until polls the page until the JavaScript expression cond is true.
func (b *browserRun) until(ctx context.Context, what, cond string) {
	b.t.Helper()
	ok, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(browserWait), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil || !ok {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main')?.innerText.slice(0, 2000) ?? ''`))
		b.t.Fatalf("waiting until %s: %v\npage:\n%s", what, err, text)
	}
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// screenshots writes PNGs to docs/console when KEYHOOK_CONSOLE_SCREENSHOTS
// is set; dir is "" otherwise.
type screenshots struct {
	t   *testing.T
	dir string
}

func newScreenshots(t *testing.T) *screenshots {
	s := &screenshots{t: t}
	if os.Getenv("KEYHOOK_CONSOLE_SCREENSHOTS") != "" {
		s.dir = filepath.Join("..", "..", "docs", "console")
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *screenshots) take(ctx context.Context, name string) {
	if s.dir == "" {
		return
	}
	s.write(ctx, name, chromedp.CaptureScreenshot())
}

// full is take for the whole page, not only what the window shows.
func (s *screenshots) full(ctx context.Context, name string) {
	if s.dir == "" {
		return
	}
	s.write(ctx, name, chromedp.FullScreenshot(100)) // 100: PNG
}

func (s *screenshots) write(ctx context.Context, name string, shot chromedp.Action[[]byte]) {
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, name), png, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// apiCaller calls the API from Go.
type apiCaller struct {
	t    *testing.T
	base string
}

func (c *apiCaller) call(token, method, path, body string, into any) int {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if into != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, into); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	if resp.StatusCode >= 300 {
		c.t.Logf("%s %s = %d %s", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode
}
