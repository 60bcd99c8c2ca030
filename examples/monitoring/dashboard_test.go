package monitoring_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestDashboard checks what Grafana would otherwise show as a broken or
// empty dashboard without an error: panel ids unique, panels inside the
// 24-column grid and not overlapping, every panel on the data source
// variable, and every $variable a query uses defined (or Grafana's own).
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type grid struct{ H, W, X, Y int }
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			GridPos    grid   `json:"gridPos"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" {
		t.Error("no uid: every import would make a new dashboard")
	}
	vars := []string{"__rate_interval", "__interval", "__range"}
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	ref := regexp.MustCompile(`\$\{?(\w+)`)
	ids := map[int]string{}
	var placed []grid
	for _, p := range dash.Panels {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for _, q := range placed {
			if g.X < q.X+q.W && q.X < g.X+g.W && g.Y < q.Y+q.H && q.Y < g.Y+g.H {
				t.Errorf("panel %q at %+v overlaps one at %+v", p.Title, g, q)
			}
		}
		placed = append(placed, g)
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %+v, want the variable ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range ref.FindAllStringSubmatch(tg.Expr, -1) {
				if !slices.Contains(vars, m[1]) {
					t.Errorf("panel %q: $%s is not a dashboard variable", p.Title, m[1])
				}
			}
		}
	}
}
