package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// PageOptions are the settings of a status page.
type PageOptions struct {
	StatusOptions
	// Refresh is how often the page gathers the fleet's status again and
	// how often a browser showing it reloads (default 10s).
	Refresh time.Duration
	// Reference, when set, returns the line's name and elements, image
	// first (the repository's index), read again at every gathering; when
	// a reading fails, the last good one stays the reference and the
	// report says why.
	Reference func(ctx context.Context) (string, []manifests.Ref, error)
}

// Page serves a fleet's status as a web page: GET / is server-rendered
// HTML (no script, no build step) that reloads itself, with one row per
// node, worst first, and its sequence at a glance (the line's newest
// versions, those the node has marked); GET /status.json is the Report.
// The status is gathered in the background every Refresh, so a page view
// costs the nodes nothing. Run gathers until ctx ends.
type Page struct {
	nodes []Node
	o     PageOptions

	mu   sync.Mutex
	rep  *Report
	at   time.Time
	good struct {
		name string
		line []manifests.Ref
	}
}

// NewPage returns a status page for nodes.
func NewPage(nodes []Node, o PageOptions) *Page {
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Second
	}
	return &Page{nodes: nodes, o: o}
}

// Run gathers the status now and then every Refresh until ctx ends.
func (p *Page) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Refresh)
	defer t.Stop()
	for {
		p.Gather(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Gather reads the status once.
func (p *Page) Gather(ctx context.Context) {
	o := p.o.StatusOptions
	errMsg := ""
	if p.o.Reference != nil {
		name, line, err := p.o.Reference(ctx)
		p.mu.Lock()
		if err != nil {
			errMsg = "reading the repository: " + err.Error()
		} else {
			p.good.name, p.good.line = name, line
		}
		o.LineName, o.Line = p.good.name, p.good.line
		p.mu.Unlock()
		if len(o.Line) == 0 && errMsg != "" {
			errMsg += " (no reference head yet)"
		}
	}
	rep := Status(ctx, p.nodes, o)
	rep.Error = errMsg
	p.mu.Lock()
	p.rep, p.at = rep, time.Now()
	p.mu.Unlock()
}

// pageWindow is how many of the line's newest versions a row shows.
const pageWindow = 12

type pageRow struct {
	NodeStatus
	Cells []pageCell
}

// ShortDigest is the first 12 hex digits of the node's config digest.
func (r pageRow) ShortDigest() string {
	if d := strings.TrimPrefix(r.ConfigDigest, manifests.DigestPrefix); len(d) >= 12 {
		return d[:12]
	}
	return ""
}

// Loaded is when the node's units last loaded config, in RFC 3339.
func (r pageRow) Loaded() string {
	if r.LoadedAt.IsZero() {
		return ""
	}
	return r.LoadedAt.UTC().Format(time.RFC3339)
}

type pageCell struct {
	Version string
	Has     bool
}

type pageData struct {
	Refresh   int
	At        string
	Reference string
	Error     string
	Summary   []string
	Versions  []string
	Rows      []pageRow
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>strata fleet status</title>
<style>
body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left}
td.st-current{background:#dfd}td.st-pending,td.st-held{background:#ffd}td.st-behind{background:#fdb}
td.st-failing,td.st-diverged,td.st-unreachable,td.bad{background:#fcc}td.has{background:#7c7}td.lacks{background:#eee}
p.failing{background:#fcc}
</style></head><body>
<h1>strata fleet status</h1>
<p id="summary">{{range .Summary}}{{.}} {{end}}&mdash; reference head <b id="reference">{{.Reference}}</b>, gathered {{.At}}</p>
{{if .Error}}<p id="error" class="failing">{{.Error}}</p>{{end}}
<table id="nodes"><thead><tr><th>node</th><th>state</th><th>head</th><th>behind</th><th>config</th><th>digest</th><th>loaded</th><th>pending</th><th>skew</th><th>note</th>{{range .Versions}}<th class="version">{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr data-node="{{.Name}}" data-state="{{.State}}"><td class="name">{{.Name}}</td><td class="state st-{{.State}}">{{.State}}</td><td class="head">{{.Head}}</td><td class="behind{{if gt .Behind 0}} bad{{end}}">{{if lt .Behind 0}}?{{else}}{{.Behind}}{{end}}</td><td class="config{{if eq .ConfigMatches 0}} bad{{end}}">{{.ConfigMatches}}</td><td class="digest">{{.ShortDigest}}</td><td class="loaded">{{.Loaded}}</td><td class="pending{{if gt .Pending 0}} bad{{end}}">{{.Pending}}</td><td class="skew">{{.Skew}}</td><td class="note{{if .Notes}} bad{{end}}">{{.Notes}}</td>{{range .Cells}}<td class="{{if .Has}}has{{else}}lacks{{end}}" title="{{.Version}}"></td>{{end}}</tr>
{{end}}</tbody></table>
</body></html>
`))

// ServeHTTP serves the page and /status.json.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	rep, line, at := p.rep, p.good.line, p.at
	p.mu.Unlock()
	if rep == nil {
		http.Error(w, "gathering the fleet's status", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/status.json":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
		return
	case "/":
	default:
		http.NotFound(w, r)
		return
	}
	d := pageData{Refresh: int(p.o.Refresh / time.Second), At: at.UTC().Format(time.RFC3339), Reference: rep.Reference, Error: rep.Error}
	if d.Refresh < 1 {
		d.Refresh = 1
	}
	for _, s := range []string{StateCurrent, StatePending, StateBehind, StateFailing, StateDiverged, StateUnreachable} {
		if n := rep.Counts[s]; n > 0 {
			d.Summary = append(d.Summary, strconv.Itoa(n)+" "+s)
		}
	}
	window := line
	if len(window) > pageWindow {
		window = window[len(window)-pageWindow:]
	}
	pos := map[string]int{}
	for i, r := range line {
		pos[r.Version] = i
	}
	for _, r := range window {
		d.Versions = append(d.Versions, r.Version)
	}
	for _, n := range rep.Sorted() {
		row := pageRow{NodeStatus: n}
		at, known := pos[n.Head]
		known = known && n.State != StateDiverged
		for _, r := range window {
			row.Cells = append(row.Cells, pageCell{Version: r.Version, Has: known && pos[r.Version] <= at})
		}
		d.Rows = append(d.Rows, row)
	}
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, d); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
