package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// configDoc is the document with the configuration table (the README
// points to it).
var configDoc = filepath.Join("docs", "OPERATIONS.md")

// TestConfigurationTableListsEverySetting: the configuration table of
// docs/OPERATIONS.md has a line for every setting, names no variable that
// is not one, and shows each setting's built-in default.
func TestConfigurationTableListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", configDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range configTableProblems(string(doc), settings) {
		t.Error(p)
	}
}

// TestConfigTableProblems: the configuration table check finds each kind
// of drift.
func TestConfigTableProblems(t *testing.T) {
	rows := []setting{{name: "SHARDSTOCK_A", def: "1"}, {name: "SHARDSTOCK_B"}, {name: "SHARDSTOCK_C", def: "x"}}
	doc := func(lines ...string) string {
		return "# x\n\n## Configuration\n\n| variable | meaning | default |\n|---|---|---|\n" +
			strings.Join(lines, "\n") + "\n\n## Security\n\n| `SHARDSTOCK_LATER` | not this table | |\n"
	}
	cases := []struct {
		name string
		doc  string
		want []string // one substring per problem
	}{
		{"all listed, two on one line", doc("| `SHARDSTOCK_A` | a | `1` |", "| `SHARDSTOCK_B`, `SHARDSTOCK_C` | b\\|c | unset, `x` |", "| `GOGC` | Go's | `400` |"), nil},
		{"a setting missing", doc("| `SHARDSTOCK_A` | a | `1` |", "| `SHARDSTOCK_C` | c | `x` |"), []string{"SHARDSTOCK_B has no line"}},
		{"a variable that is no setting", doc("| `SHARDSTOCK_A`, `SHARDSTOCK_B`, `SHARDSTOCK_C` | | `1`, `x` |", "| `SHARDSTOCK_GONE` | | |"), []string{"SHARDSTOCK_GONE, which is no setting"}},
		{"a wrong default", doc("| `SHARDSTOCK_A` | a | `2` |", "| `SHARDSTOCK_B`, `SHARDSTOCK_C` | | `x` |"), []string{"SHARDSTOCK_A: the default in"}},
		{"a variable twice", doc("| `SHARDSTOCK_A` | a | `1` |", "| `SHARDSTOCK_A`, `SHARDSTOCK_B`, `SHARDSTOCK_C` | | `1`, `x` |"), []string{"SHARDSTOCK_A twice"}},
		{"no table", "# x\n", []string{"no configuration table"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := configTableProblems(tc.doc, rows)
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q; want %d naming %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Fatalf("problem %q; want one naming %q", got[i], w)
				}
			}
		})
	}
}

// notSettings are variables the configuration table may name that
// are no setting of settings.go.
var notSettings = map[string]bool{"GOGC": true} // read by serve itself, and by Go

// configTableProblems compares the configuration table in doc (the lines
// of the "## Configuration" section that start with a variable) with rows:
// each row has a line and its default there, each name on a line is a row
// or one of notSettings, and no name is on two lines.
func configTableProblems(doc string, rows []setting) []string {
	defaults, problems := configTable(doc)
	if len(defaults) == 0 {
		return append(problems, configDoc+" has no configuration table (a \"## Configuration\" section with | `VARIABLE` | lines)")
	}
	known := map[string]bool{}
	for _, s := range rows {
		known[s.name] = true
		cell, ok := defaults[s.name]
		switch {
		case !ok:
			problems = append(problems, s.name+" has no line in the configuration table of "+configDoc)
		case s.def != "" && !strings.Contains(cell, "`"+s.def+"`"):
			problems = append(problems, fmt.Sprintf("%s: the default in %s, %q, does not show `%s`", s.name, configDoc, cell, s.def))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(defaults)) {
		if !known[name] && !notSettings[name] {
			problems = append(problems, "the configuration table of "+configDoc+" names "+name+", which is no setting")
		}
	}
	return problems
}

// configVariable is a variable's name as the table's first cell shows it.
var configVariable = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")

// configTable reads the configuration table of doc: each variable named
// in a line's first cell, with that line's last cell (the default), and a
// problem for each name on more than one line.
func configTable(doc string) (map[string]string, []string) {
	_, section, _ := strings.Cut(doc, "\n## Configuration\n")
	section, _, _ = strings.Cut(section, "\n## ")
	defaults := map[string]string{}
	var problems []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		for _, m := range configVariable.FindAllStringSubmatch(cells[0], -1) {
			if _, dup := defaults[m[1]]; dup {
				problems = append(problems, "the configuration table of "+configDoc+" names "+m[1]+" twice")
			}
			defaults[m[1]] = cells[len(cells)-1]
		}
	}
	return defaults, problems
}
