package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"regexp"
	"sort"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// FormatVersion is the dataset format this package writes and reads.
const FormatVersion = 1

// Type is a column's type.
//
// Scalars (the integers and floats) are fixed-width little-endian and live
// in index.bin. Everything else lives in the shards, a value per sample with
// its length in the index: Binary and String; FixedSizeBinary(n);
// FixedSizeList(t, n), List(t) and LargeList(t) of a numeric scalar t (the
// elements' little-endian bytes end to end, the usual way to store
// embeddings, feature vectors and small tensors). Tensors stay out of
// index.bin because every reader holds it in memory.
type Type string

// Column types. Binary and String are variable-length; the rest are
// fixed-width little-endian.
const (
	Binary  Type = "binary"
	String  Type = "string"
	Int8    Type = "int8"
	Int16   Type = "int16"
	Int32   Type = "int32"
	Int64   Type = "int64"
	Uint8   Type = "uint8"
	Uint16  Type = "uint16"
	Uint32  Type = "uint32"
	Uint64  Type = "uint64"
	Float32 Type = "float32"
	Float64 Type = "float64"
)

// FixedSizeBinary is the type of values of n bytes each.
func FixedSizeBinary(n int) Type { return Type(fmt.Sprintf("fixed_size_binary[%d]", n)) }

// FixedSizeList is the type of n-element vectors of numeric scalar elem.
func FixedSizeList(elem Type, n int) Type {
	return Type(fmt.Sprintf("fixed_size_list<%s>[%d]", elem, n))
}

// List is the type of variable-length vectors of numeric scalar elem, with
// 32-bit offsets when loaded.
func List(elem Type) Type { return Type("list<" + elem + ">") }

// LargeList is List with 64-bit offsets when loaded.
func LargeList(elem Type) Type { return Type("large_list<" + elem + ">") }

var scalarTypes = map[Type]arrow.DataType{
	Int8: arrow.PrimitiveTypes.Int8, Int16: arrow.PrimitiveTypes.Int16,
	Int32: arrow.PrimitiveTypes.Int32, Int64: arrow.PrimitiveTypes.Int64,
	Uint8: arrow.PrimitiveTypes.Uint8, Uint16: arrow.PrimitiveTypes.Uint16,
	Uint32: arrow.PrimitiveTypes.Uint32, Uint64: arrow.PrimitiveTypes.Uint64,
	Float32: arrow.PrimitiveTypes.Float32, Float64: arrow.PrimitiveTypes.Float64,
}

// layout is how a type's values are stored and loaded. Types are parsed
// where a column is opened (Create, Open), not per value.
type layout struct {
	arrow arrow.DataType
	// inline is the byte width of a scalar, stored in index.bin; 0 for a
	// type whose values live in the shards.
	inline int
	// For shard-stored types: elem is the byte width of one element of the
	// loaded values buffer (1 for binary, string, fixed_size_binary), elemType
	// the element's Arrow type for lists (nil otherwise), size the bytes every
	// value must have (0 when variable), offsets the byte width of the loaded
	// offsets (4, 8; 0 for fixed-size types, which have none).
	elem     int
	elemType arrow.DataType
	size     int
	offsets  int
}

var (
	fixedBinaryRE = regexp.MustCompile(`^fixed_size_binary\[([0-9]{1,10})\]$`)
	fixedListRE   = regexp.MustCompile(`^fixed_size_list<([a-z0-9]+)>\[([0-9]{1,10})\]$`)
	listRE        = regexp.MustCompile(`^(list|large_list)<([a-z0-9]+)>$`)
)

// layout parses t.
func (t Type) layout() (layout, error) {
	switch t {
	case Binary:
		return layout{arrow: arrow.BinaryTypes.Binary, elem: 1, offsets: 4}, nil
	case String:
		return layout{arrow: arrow.BinaryTypes.String, elem: 1, offsets: 4}, nil
	}
	if at, ok := scalarTypes[t]; ok {
		return layout{arrow: at, inline: at.(arrow.FixedWidthDataType).Bytes()}, nil
	}
	// A size must keep a value's bytes within what the index records
	// (uint32) and Arrow's 32-bit list sizes.
	size := func(s string, w int) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || int64(n)*int64(w) > math.MaxInt32 {
			return 0, fmt.Errorf("type %q: size must be 1 to %d", t, math.MaxInt32/w)
		}
		return n, nil
	}
	elem := func(e string) (arrow.DataType, int, error) {
		at, ok := scalarTypes[Type(e)]
		if !ok {
			return nil, 0, fmt.Errorf("type %q: elements must be an integer or float type, not %q", t, e)
		}
		return at, at.(arrow.FixedWidthDataType).Bytes(), nil
	}
	if m := fixedBinaryRE.FindStringSubmatch(string(t)); m != nil {
		n, err := size(m[1], 1)
		if err != nil {
			return layout{}, err
		}
		return layout{arrow: &arrow.FixedSizeBinaryType{ByteWidth: n}, elem: 1, size: n}, nil
	}
	if m := fixedListRE.FindStringSubmatch(string(t)); m != nil {
		et, w, err := elem(m[1])
		if err != nil {
			return layout{}, err
		}
		n, err := size(m[2], w)
		if err != nil {
			return layout{}, err
		}
		return layout{arrow: arrow.FixedSizeListOf(int32(n), et), elem: w, elemType: et, size: n * w}, nil
	}
	if m := listRE.FindStringSubmatch(string(t)); m != nil {
		et, w, err := elem(m[2])
		if err != nil {
			return layout{}, err
		}
		if m[1] == "large_list" {
			return layout{arrow: arrow.LargeListOf(et), elem: w, elemType: et, offsets: 8}, nil
		}
		return layout{arrow: arrow.ListOf(et), elem: w, elemType: et, offsets: 4}, nil
	}
	return layout{}, fmt.Errorf("unknown type %q", t)
}

// Width is the byte width of a scalar type (stored in the index), 0 for
// the types stored in the shards.
func (t Type) Width() int {
	l, _ := t.layout()
	return l.inline
}

// ArrowType is the Arrow type t loads as; nil when t is not a valid type.
func (t Type) ArrowType() arrow.DataType {
	l, _ := t.layout()
	return l.arrow
}

// Column is one field of a dataset's schema.
type Column struct {
	Name string `json:"name"`
	Type Type   `json:"type"`
}

// Shard is one shard file and how many consecutive samples it holds.
type Shard struct {
	File    string `json:"file"`
	Samples int64  `json:"samples"`
	Bytes   int64  `json:"bytes"`
}

// Manifest describes a dataset (manifest.json).
type Manifest struct {
	Version   int      `json:"version"`
	Name      string   `json:"name"`
	Columns   []Column `json:"columns"`
	Samples   int64    `json:"samples"`
	Shards    []Shard  `json:"shards"`
	IndexSize int64    `json:"index_size"`
	Hash      string   `json:"hash"`              // SHA-256 of index.bin
	Classes   []string `json:"classes,omitempty"` // label names, by label value
	Source    string   `json:"source,omitempty"`  // what it was imported from
}

// Bytes is the size of all shard files.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, s := range m.Shards {
		n += s.Bytes
	}
	return n
}

// Schema is the Arrow schema of the named columns (all when none).
func (m *Manifest) Schema(columns ...string) (*arrow.Schema, error) {
	cols, err := m.project(columns)
	if err != nil {
		return nil, err
	}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = arrow.Field{Name: m.Columns[c].Name, Type: m.Columns[c].Type.ArrowType()}
	}
	return arrow.NewSchema(fields, nil), nil
}

// project turns column names into schema positions, in schema order.
func (m *Manifest) project(names []string) ([]int, error) {
	if len(names) == 0 {
		all := make([]int, len(m.Columns))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, n := range names {
		i := m.column(n)
		if i < 0 {
			return nil, fmt.Errorf("dataset %s has no column %q", m.Name, n)
		}
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out, nil
}

func (m *Manifest) column(name string) int {
	for i, c := range m.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// checkSchema rejects schemas the format cannot hold.
func checkSchema(cols []Column) error {
	if len(cols) == 0 {
		return fmt.Errorf("schema has no columns")
	}
	seen := map[string]bool{}
	for _, c := range cols {
		if c.Name == "" || seen[c.Name] {
			return fmt.Errorf("schema: column name %q empty or repeated", c.Name)
		}
		seen[c.Name] = true
		if _, err := c.Type.layout(); err != nil {
			return fmt.Errorf("schema: column %q: %w", c.Name, err)
		}
	}
	return nil
}

// Dir is where a dataset lives in Sluice.
func Dir(name string) string { return path.Join("/datasets", name) }

func checkName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("dataset name %q: use letters, digits, '.', '_' and '-' (at most 128)", name)
	}
	return nil
}

// index is index.bin in memory.
type index struct {
	n      int64
	vars   []int // schema positions of the variable-length columns
	fixed  []int // and of the fixed-width ones
	start  []uint64
	length []uint32 // [n][len(vars)]
	crc    []uint32
	values map[int][]byte // fixed-width column -> n*width bytes
	shards []int64        // first sample of each shard, plus n at the end
	lay    []layout       // each column's, in schema order
}

// setColumns parses a checked schema's types and sorts its columns into
// those stored in the shards and in the index.
func (ix *index) setColumns(cols []Column) {
	ix.lay = make([]layout, len(cols))
	for i, c := range cols {
		ix.lay[i], _ = c.Type.layout() // checkSchema passed
		if ix.lay[i].inline == 0 {
			ix.vars = append(ix.vars, i)
		} else {
			ix.fixed = append(ix.fixed, i)
		}
	}
}

func (ix *index) shardOf(sample int64) int {
	return sort.Search(len(ix.shards)-1, func(s int) bool { return ix.shards[s+1] > sample })
}

// varRange is where variable-length column v (an index into vars) of a
// sample lies in its shard.
func (ix *index) varRange(sample int64, v int) (off uint64, n uint32) {
	off = ix.start[sample]
	row := ix.length[sample*int64(len(ix.vars)):][:len(ix.vars)]
	for _, l := range row[:v] {
		off += uint64(l)
	}
	return off, row[v]
}

// sampleBytes is a sample's stored size, every variable-length column.
func (ix *index) sampleBytes(sample int64) int64 {
	var n int64
	for _, l := range ix.length[sample*int64(len(ix.vars)):][:len(ix.vars)] {
		n += int64(l)
	}
	return n
}

func (ix *index) encode(cols []Column) []byte {
	var out []byte
	for _, s := range ix.start {
		out = binary.LittleEndian.AppendUint64(out, s)
	}
	for _, l := range ix.length {
		out = binary.LittleEndian.AppendUint32(out, l)
	}
	for _, c := range ix.crc {
		out = binary.LittleEndian.AppendUint32(out, c)
	}
	for _, f := range ix.fixed {
		out = append(out, ix.values[f]...)
	}
	return out
}

func decodeIndex(m *Manifest, b []byte) (*index, error) {
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != m.Hash {
		return nil, fmt.Errorf("dataset %s: index.bin does not match the manifest's content hash", m.Name)
	}
	n := m.Samples
	ix := &index{n: n, values: map[int][]byte{}}
	ix.setColumns(m.Columns)
	want := n*8 + n*int64(len(ix.vars))*4 + n*4
	for _, f := range ix.fixed {
		want += n * int64(ix.lay[f].inline)
	}
	if int64(len(b)) != want {
		return nil, fmt.Errorf("dataset %s: index.bin has %d bytes, the schema needs %d", m.Name, len(b), want)
	}
	ix.start = make([]uint64, n)
	for i := range ix.start {
		ix.start[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	b = b[n*8:]
	ix.length = make([]uint32, n*int64(len(ix.vars)))
	for i := range ix.length {
		ix.length[i] = binary.LittleEndian.Uint32(b[i*4:])
	}
	b = b[len(ix.length)*4:]
	ix.crc = make([]uint32, n)
	for i := range ix.crc {
		ix.crc[i] = binary.LittleEndian.Uint32(b[i*4:])
	}
	b = b[n*4:]
	for _, f := range ix.fixed {
		w := n * int64(ix.lay[f].inline)
		ix.values[f], b = b[:w], b[w:]
	}
	ix.shards = []int64{0}
	for _, s := range m.Shards {
		ix.shards = append(ix.shards, ix.shards[len(ix.shards)-1]+s.Samples)
	}
	if ix.shards[len(ix.shards)-1] != n {
		return nil, fmt.Errorf("dataset %s: shards hold %d samples, the manifest says %d", m.Name, ix.shards[len(ix.shards)-1], n)
	}
	// Tensor values must fit their type: a whole number of elements, of
	// the type's size when it has one (binary and string take any length).
	var tensors []int // positions in vars
	for v, c := range ix.vars {
		if ix.lay[c].size > 0 || ix.lay[c].elem > 1 {
			tensors = append(tensors, v)
		}
	}
	for i := int64(0); i < n; i++ {
		for _, v := range tensors {
			lay := ix.lay[ix.vars[v]]
			if _, l := ix.varRange(i, v); (lay.size > 0 && int(l) != lay.size) || int(l)%lay.elem != 0 {
				c := m.Columns[ix.vars[v]]
				return nil, fmt.Errorf("dataset %s: sample %d has %d bytes in column %s (%s)", m.Name, i, l, c.Name, c.Type)
			}
		}
		s := ix.shardOf(i)
		if end := ix.start[i] + uint64(ix.sampleBytes(i)); end > uint64(m.Shards[s].Bytes) {
			return nil, fmt.Errorf("dataset %s: sample %d ends at byte %d of shard %s, past its end", m.Name, i, end, m.Shards[s].File)
		}
	}
	return ix, nil
}

func encodeManifest(m *Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	return append(b, '\n'), err
}

func decodeManifest(name string, b []byte) (*Manifest, error) {
	m := new(Manifest)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("dataset %s: manifest.json: %w", name, err)
	}
	if m.Version != FormatVersion {
		return nil, fmt.Errorf("dataset %s: format version %d, this build reads %d", name, m.Version, FormatVersion)
	}
	if err := checkSchema(m.Columns); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	return m, nil
}
