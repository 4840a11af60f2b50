package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
)

// jsonl reads the files twice: once to settle the schema, once to write.
func (im *importer) jsonl(files []string) error {
	type kind struct {
		str, num, float, boolean, nested bool
	}
	var order []string
	kinds := map[string]*kind{}
	err := eachJSONLine(files, func(where string, obj []field) error {
		for _, f := range obj {
			k := kinds[f.name]
			if k == nil {
				k = &kind{}
				kinds[f.name] = k
				order = append(order, f.name)
			}
			switch v := f.value.(type) {
			case nil:
				return fmt.Errorf("%s: field %q is null (nulls are not supported)", where, f.name)
			case string:
				k.str = true
			case json.Number:
				k.num = true
				if _, err := v.Int64(); err != nil {
					k.float = true
				}
			case bool:
				k.boolean = true
			default:
				k.nested = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var cols []Column
	for _, n := range order {
		k := kinds[n]
		t := String
		switch {
		case k.num && !k.str && !k.boolean && !k.nested && k.float:
			t = Float64
		case k.num && !k.str && !k.boolean && !k.nested:
			t = Int64
		case k.boolean && !k.str && !k.num && !k.nested:
			t = Uint8
		case k.str && !k.num && !k.boolean && !k.nested:
			t = String
		case k.nested && !k.str && !k.num && !k.boolean:
			t = String
		default:
			return fmt.Errorf("field %q mixes types across lines", n)
		}
		cols = append(cols, Column{n, t})
	}
	if len(cols) == 0 {
		return nil
	}
	if err := im.create(cols, nil, "jsonl"); err != nil {
		return err
	}
	vals := make([]any, len(cols))
	return eachJSONLine(files, func(where string, obj []field) error {
		for i := range vals {
			vals[i] = nil
		}
		size := int64(0)
		for _, f := range obj {
			i := slices.IndexFunc(cols, func(c Column) bool { return c.Name == f.name })
			switch cols[i].Type {
			case Float64:
				v, _ := f.value.(json.Number).Float64()
				vals[i] = v
			case Int64:
				v, _ := f.value.(json.Number).Int64()
				vals[i] = v
			case Uint8:
				vals[i] = map[bool]uint8{false: 0, true: 1}[f.value.(bool)]
			default:
				if s, ok := f.value.(string); ok {
					vals[i] = s
				} else {
					vals[i] = string(f.raw)
				}
			}
			size += int64(len(f.raw))
		}
		for i, v := range vals {
			if v == nil {
				return fmt.Errorf("%s: field %q is missing", where, cols[i].Name)
			}
		}
		im.progress(size)
		return im.w.Add(vals...)
	})
}

type field struct {
	name  string
	value any
	raw   json.RawMessage
}

// eachJSONLine calls fn with each line's fields in their order.
func eachJSONLine(files []string, fn func(where string, obj []field) error) error {
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		line := 0
		for sc.Scan() {
			line++
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			where := fmt.Sprintf("%s:%d", p, line)
			obj, err := parseObject(b)
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", where, err)
			}
			if err := fn(where, obj); err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

func parseObject(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{name: t.(string), value: v, raw: raw})
	}
	return out, nil
}
