package nametable

import (
	"strings"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

// Position says where the storage of the entry named host lies in t: a
// share in [0, 1), in the order the table's storage was filled (New fills
// it in the order of its entries, a patch appends). The chunks that a
// patch removing the entries of one range of positions empties are
// dropped from the table it returns, so a caller replacing most of a
// table in several patches, each removing the entries of the next range
// (and adding what replaces them), frees the old table's memory as it
// goes instead of holding two tables at once.
//
// ok is false when host is not the hostname of an entry that defines
// names in t (an entry without addresses, endpoints or canonical name
// defines none; removing it changes nothing).
func (t *Table) Position(host string) (share float64, ok bool) {
	if t == nil || t.st.Next() == 0 {
		return 0, false
	}
	name, err := normalizeName(host, true)
	if err != nil {
		return 0, false
	}
	var id arena.ID
	if w, wild := strings.CutPrefix(name, "*."); wild {
		n := t.wild[w]
		if n == nil {
			return 0, false
		}
		if id, ok = t.st.IDOf(n); !ok {
			return 0, false
		}
	} else {
		i, found := t.st.Find(name)
		if !found {
			return 0, false
		}
		id = t.st.At(i)
		if n := t.st.Node(id); n.is(flagNoCanon) || n.isVersion() {
			return 0, false
		}
	}
	return float64(id) / float64(t.st.Next()), true
}
