// Package migrate loads the embedded, numbered SQL migrations of a store.
// Each dialect keeps its own files with the same numbers (river's
// convention), so a version means the same change on both; a dialect
// with nothing to do for a version keeps a comment-only file.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load reads every NNN_name.sql file in dir of fsys, sorted by version,
// and refuses gaps and duplicates.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("load migrations: %s: name must be NNN_name.sql", name)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("load migrations: %w", err)
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("load migrations: expected version %d, found %d (%s)", i+1, m.Version, m.Name)
		}
	}
	return out, nil
}
