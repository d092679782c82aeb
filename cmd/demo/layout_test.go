package main

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/iq"
)

// measureScript, added to the status page under test, waits for the grid
// and the charts to be drawn, then writes into the page, as JSON, the
// window's width, the document's, and every element of every pane and
// section with the part of it that shows: its box cut to each scrolling
// ancestor's.
const measureScript = `<script>
(function measure() {
  if (!document.querySelector("#grid tbody tr") || !document.querySelector("#charts svg")) {
    setTimeout(measure, 50);
    return;
  }
  const shown = (e) => {
    const b = e.getBoundingClientRect();
    let r = { l: b.left, t: b.top, r: b.right, b: b.bottom };
    for (let a = e.parentElement; a; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.overflowX === "visible" && s.overflowY === "visible") continue;
      const c = a.getBoundingClientRect();
      r = { l: Math.max(r.l, c.left), t: Math.max(r.t, c.top), r: Math.min(r.r, c.right), b: Math.min(r.b, c.bottom) };
    }
    return r;
  };
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.dataset.host ? "[" + e.dataset.host + "]" : "") +
    " " + (e.textContent || "").trim().slice(0, 30);
  const out = { width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth, panels: [] };
  for (const p of document.querySelectorAll("section")) {
    const boxes = [];
    for (const e of p.querySelectorAll("*")) {
      const r = shown(e);
      if (r.r - r.l > 0.5 && r.b - r.t > 0.5) boxes.push({ what: name(e), ...r });
    }
    out.panels.push({ name: p.querySelector("h2").textContent, box: shown(p), boxes });
  }
  const pre = document.createElement("pre");
  pre.id = "layout";
  pre.hidden = true;
  pre.textContent = JSON.stringify(out);
  document.body.append(pre);
})();
</script>`

type layoutBox struct {
	What       string
	L, T, R, B float64
}

type pageLayout struct {
	Width, ScrollWidth float64
	Panels             []struct {
		Name  string
		Box   layoutBox
		Boxes []layoutBox
	}
}

// overlap reports whether two boxes share more than a rounding error.
func (a layoutBox) overlap(b layoutBox) bool {
	return min(a.R, b.R)-max(a.L, b.L) > 0.5 && min(a.B, b.B)-max(a.T, b.T) > 0.5
}

// layoutCluster is a cluster of n instances and partitions counts
// partitions, each with an active and a standby, and with one instance
// dead when dead is set, as /cluster.json and /cluster-history.json give
// it to the page.
func layoutCluster(n, partitions int, dead bool) (pageView, clusterHistory) {
	now := time.Now().UnixMilli()
	v := clusterView{From: "127.0.0.1:40001", Partitions: map[string]int32{countsStore: int32(partitions)}, Taken: now}
	h := clusterHistory{Taken: now, WindowMs: (historyEvery * historyLen).Milliseconds()}
	for i := range n {
		in := instanceView{}
		in.Host = fmt.Sprintf("127.0.0.%d:4%04d", i+1, i+1)
		hh := hostHistory{Host: in.Host}
		for s := range 120 {
			hh.Samples = append(hh.Samples, sample{At: now - int64(120-s)*1000, Rate: float64(400 + 10*s), Lag: float64(30 * (s % 7))})
		}
		if dead && i == n-1 {
			in.Error = "unreachable: dial tcp " + in.Host + ": connect: connection refused (no answer to /v1/lags)"
			hh.Error = in.Error
		}
		for p := range partitions {
			sp := iq.StorePartition{Store: countsStore, Partition: int32(p)}
			switch {
			case p%n == i:
				in.Active = append(in.Active, sp)
				if in.Error == "" {
					in.Lags = append(in.Lags, replicaLag{Store: countsStore, Partition: int32(p), Role: "active", Lag: 0})
				}
			case (p+1)%n == i:
				in.Standby = append(in.Standby, sp)
				if in.Error == "" {
					in.Lags = append(in.Lags, replicaLag{Store: countsStore, Partition: int32(p), Role: "standby", Lag: 12345})
				}
			}
		}
		v.Instances = append(v.Instances, in)
		h.Instances = append(h.Instances, hh)
	}
	return v.page(), h
}

// TestStatusPageFits loads the status page in headless Chromium at three
// widths, for a cluster with a dead instance and for a large one, and
// checks from the boxes the browser laid out that no element of one pane
// or section is drawn over an element of another, and that the page needs
// no sideways scrolling. The screenshots go to $EDDY_SCREENSHOT_DIR when it
// is set.
func TestStatusPageFits(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("Chromium is not installed (looked for chromium, chromium-browser, google-chrome and google-chrome-stable on PATH): " +
			"skipping the real-browser test of the status page's layout; install it (apt-get install chromium) to run it")
	}
	shots := os.Getenv("EDDY_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	page := strings.Replace(string(indexHTML), "</body>", measureScript+"\n</body>", 1)
	for _, c := range []struct {
		name          string
		n, partitions int
		dead          bool
	}{
		{"3 instances, one dead", 3, 6, true},
		{"5 instances x 24 partitions", 5, 24, false},
	} {
		view, hist := layoutCluster(c.n, c.partitions, c.dead)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/":
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.Write([]byte(page))
			case "/cluster.json":
				json.NewEncoder(w).Encode(view)
			case "/cluster-history.json":
				json.NewEncoder(w).Encode(hist)
			default:
				http.NotFound(w, r)
			}
		}))
		for _, width := range []int{1024, 1400, 2560} {
			t.Run(fmt.Sprintf("%s at %d px", c.name, width), func(t *testing.T) {
				shot := filepath.Join(shots, fmt.Sprintf("status-%d-%d-%dpx.png", c.n, c.partitions, width))
				dom := dumpDOM(t, bin, srv.URL+"/", 3*time.Second,
					fmt.Sprintf("--window-size=%d,1000", width), "--screenshot="+shot, "--hide-scrollbars")
				m := regexp.MustCompile(`(?s)<pre id="layout"[^>]*>(.*?)</pre>`).FindStringSubmatch(dom)
				require.NotNil(t, m, "the page was measured:\n%s", dom)
				var l pageLayout
				require.NoError(t, json.Unmarshal([]byte(html.UnescapeString(m[1])), &l))
				require.Equal(t, float64(width), l.Width)
				require.LessOrEqual(t, l.ScrollWidth, l.Width, "the page fits its width without scrolling sideways")
				require.Len(t, l.Panels, 4, "replicas, input, query a word, watch a word")
				for i, p := range l.Panels {
					require.NotEmpty(t, p.Boxes, "pane %q shows something", p.Name)
					for _, q := range l.Panels[i+1:] {
						for _, a := range p.Boxes {
							for _, b := range q.Boxes {
								require.False(t, a.overlap(b), "%q of %q is drawn over %q of %q (%+v, %+v)", a.What, p.Name, b.What, q.Name, a, b)
							}
						}
					}
				}
				if _, err := os.Stat(shot); err != nil {
					t.Logf("no screenshot from this Chromium: %v", err)
				}
			})
		}
		srv.Close()
	}
}
