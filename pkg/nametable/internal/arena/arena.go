// Package arena is the storage of a name table: the nodes of its stored
// names, their records and the bytes of their names, cut from chunks; the
// index from a name to its node; and, for tables made by patching, the
// count of references into each chunk that lets a table drop the chunks
// none of its names uses any more. It knows nothing of DNS: the table
// (pkg/nametable) decides what a node means and which names to store.
//
// Invariants, which the table relies on and the tests of this package
// check:
//
//  1. Written once, never moved. A node, a record or a name's bytes keep
//     their place in their chunk, and their reference (node ID, record or
//     text reference), for the life of the chunk, and nothing is written
//     over them: strings that view a chunk's bytes stay valid, and stores
//     that share a chunk (a table and the tables patched from it) never
//     race, so a table serves while another is made from it.
//  2. One writer per chunk tail. Stores forked from one another share
//     their chunks; only the tip (Claim) may append to the unused tails
//     of the last ones. A fork off any other store clips the tails and
//     starts chunks of its own.
//  3. A node type N embeds Head as its first field: the index reads a
//     node's name through it, without calling into the table.
//  4. The index maps each name to at most one node; a slot holds the node
//     ID + 1 (0 is empty) under 8 bits of the name's hash, at a load of
//     at most 3/4 (linear probing, backward-shift deletion: no
//     tombstones).
//  5. Once counting (a fork), every node in the index, and every node the
//     table Refs (its wildcards), counts once in the chunk of the node,
//     the chunk of its name and the chunk of its first record. Reclaim
//     drops the chunks whose count is 0, except the last of each kind; no
//     counted node refers to a dropped chunk.
package arena

import (
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"sync/atomic"
	"unsafe"
)

// ID is a node's place: chunk<<NodeChunkBits | index in the chunk.
type ID = uint32

const (
	// NodeChunkBits is log2 of the nodes per chunk.
	NodeChunkBits = 10
	nodeChunk     = 1 << NodeChunkBits
	// MaxNodes is bounded by the index, whose slots keep 24 bits of an ID.
	MaxNodes = 1<<idBits - 2

	// Text and record references are chunk<<16 | offset.
	textChunkMin = 4 << 10
	textChunkMax = 64 << 10 // offsets are 16 bits
	recChunkMin  = 64
	recChunkMax  = 4096 // 64 KiB of interface values
)

// ErrTooBig is returned by NewNode past MaxNodes.
var ErrTooBig = errors.New("table over 16,777,214 names")

// Head is what the store reads of a node: where its name and its first
// record are. A node type embeds it as its first field.
type Head struct {
	Name uint32 // text reference of the node's name
	RR   uint32 // record reference of its first record
}

// Store holds a table's nodes (of type N), records (of type R) and names.
// The zero value is not ready: use New. A Store is copied by value into
// the table that owns it; Fork makes the copy a patched table owns.
type Store[N, R any] struct {
	nodes [][]N
	recs  [][]R
	text  [][]byte
	next  ID // node slots used, live or not

	// The index (index.go): slots over node IDs, count the names in it.
	slots []uint32
	seed  maphash.Seed
	count int

	// live counts the references into each chunk (live.go), nil until
	// the store is forked.
	live *counts
	// tip is shared by the stores forked from one New (invariant 2).
	tip *tip[N, R]
}

type tip[N, R any] struct{ p atomic.Pointer[Store[N, R]] }

// New returns an empty store, with an index sized for about names names
// (0 if unknown). It panics if N does not begin with Head.
func New[N, R any](names int) Store[N, R] {
	nt := reflect.TypeFor[N]()
	if nt.Kind() != reflect.Struct || nt.NumField() == 0 || nt.Field(0).Type != reflect.TypeFor[Head]() {
		panic(fmt.Sprintf("arena: node type %v does not begin with arena.Head", nt))
	}
	s := Store[N, R]{seed: maphash.MakeSeed()}
	if names > 0 {
		s.Grow(names*4/3 + 1)
	}
	return s
}

func head[N any](n *N) *Head { return (*Head)(unsafe.Pointer(n)) }

// Start makes s the tip of a new family of stores: the store a table
// built with New keeps, at its final address.
func (s *Store[N, R]) Start() {
	s.tip = &tip[N, R]{}
	s.tip.p.Store(s)
}

// Started reports whether s belongs to a family (Start or Fork).
func (s *Store[N, R]) Started() bool { return s.tip != nil }

// Claim takes the tip from s if s holds it, so that a fork of s may
// append to the shared tails; the caller then Releases it.
func (s *Store[N, R]) Claim() bool { return s.tip.p.CompareAndSwap(s, nil) }

// Release hands the tip Claim took to to: the fork when it is kept, s
// itself when it is not.
func (s *Store[N, R]) Release(to *Store[N, R]) { s.tip.p.Store(to) }
