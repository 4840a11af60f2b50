package nemesis

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Key is one register: a block of a file.
type Key struct {
	ID        int
	File      int   // index into the workload's files
	Off       int64 // byte offset in the file, a multiple of BlockSize
	WriteOnce bool  // written once at setup, only read afterwards
	// Inline: the key is the whole of a small file of its own (File
	// indexes the workload's small files), whose bytes the metadata
	// service keeps; written once, read by opening the file each time.
	Inline bool
}

// Verdict is what the checker found in a history.
type Verdict struct {
	Ops          int // ops recorded, every phase
	Reads        int // reads that returned a value (corrupt ones included)
	FailedReads  int
	AckedWrites  int
	InfoWrites   int // failed or timed out: indeterminate
	Linearizable bool
	// Keys whose history is not linearizable, and keys the checker gave up
	// on within its time (counted as neither).
	NonLinearizable []int
	Unknown         []int
	// Acknowledged writes that the final state does not hold: the write
	// the final read returned finished before they began.
	LostWrites int
	Lost       []string
	Corrupt    []string // reads of torn or corrupt blocks, or another key's
	Missing    []string // keys with no successful final read
	Phantom    []string // values read that nobody wrote
	// Visualizations of non-linearizable keys (porcupine HTML), when the
	// check was given a directory.
	Visualizations []string
}

// OK reports whether the history passed every check.
func (v *Verdict) OK() bool {
	return v.Linearizable && v.LostWrites == 0 && len(v.Corrupt) == 0 && len(v.Missing) == 0 && len(v.Phantom) == 0
}

// Problems lists what failed, one line each (at most a few per kind).
func (v *Verdict) Problems() []string {
	var out []string
	add := func(what string, list []string) {
		for i, s := range list {
			if i == 10 {
				out = append(out, fmt.Sprintf("%s: ... %d more", what, len(list)-10))
				break
			}
			out = append(out, what+": "+s)
		}
	}
	if len(v.NonLinearizable) > 0 {
		out = append(out, fmt.Sprintf("not linearizable: keys %v", v.NonLinearizable))
	}
	add("acknowledged write lost", v.Lost)
	add("corrupt read", v.Corrupt)
	add("no final read", v.Missing)
	add("value never written", v.Phantom)
	return out
}

// regInput is a register op's input to the porcupine model.
type regInput struct {
	Write bool
	Value uint64
}

// RegisterModel is a register of uint64 values starting at 0 (a block of
// zeros): a write sets it, a read returns it.
func RegisterModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return uint64(0) },
		Step: func(state, input, output any) (bool, any) {
			in := input.(regInput)
			if in.Write {
				return true, in.Value
			}
			return output.(uint64) == state.(uint64), state
		},
		DescribeOperation: func(input, output any) string {
			in := input.(regInput)
			if in.Write {
				return "write " + FormatValue(in.Value)
			}
			return "read " + FormatValue(output.(uint64))
		},
		DescribeState: func(state any) string { return FormatValue(state.(uint64)) },
	}
}

// CheckHistory checks ops (every phase; the final phase's reads are the
// final state) against keys. Each key is checked for linearizability on
// its own, within timeout; visDir, when set, receives a porcupine
// visualization of each key that fails.
func CheckHistory(ops []Op, keys []Key, timeout time.Duration, visDir string) *Verdict {
	v := &Verdict{Ops: len(ops), Linearizable: true}
	byKey := map[int][]Op{}
	for _, o := range ops {
		byKey[o.Key] = append(byKey[o.Key], o)
		switch {
		case o.Kind == OpWrite && o.Status == StatusOK:
			v.AckedWrites++
		case o.Kind == OpWrite:
			v.InfoWrites++
		case o.Status == StatusOK:
			v.Reads++
		case o.Status == StatusCorrupt:
			v.Reads++
			v.Corrupt = append(v.Corrupt, fmt.Sprintf("%v: %s", o, o.Err))
		default:
			v.FailedReads++
		}
	}
	model := RegisterModel()
	for _, k := range keys {
		kops := byKey[k.ID]
		v.checkFinal(k, kops)
		var hist []porcupine.Operation
		end := int64(math.MaxInt64)
		read := map[uint64]bool{}
		for _, o := range kops {
			if o.Kind == OpRead && o.Status == StatusOK {
				read[o.Value] = true
			}
		}
		for _, o := range kops {
			switch {
			case o.Kind == OpWrite && o.Status == StatusOK:
				hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: regInput{true, o.Value}, Call: o.Call, Output: uint64(0), Return: o.Return})
			case o.Kind == OpWrite && !read[o.Value]:
				// An indeterminate write no read saw can take effect last
				// of all, after every other op, where it changes nothing:
				// leaving it out changes no verdict, and keeps the search
				// small when many writes fail (a full disk).
			case o.Kind == OpWrite: // indeterminate: it may take effect any time after its call
				end--
				hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: regInput{true, o.Value}, Call: o.Call, Output: uint64(0), Return: end})
			case o.Status == StatusOK:
				hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: regInput{}, Call: o.Call, Output: o.Value, Return: o.Return})
			}
		}
		res, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
		switch res {
		case porcupine.Illegal:
			v.Linearizable = false
			v.NonLinearizable = append(v.NonLinearizable, k.ID)
			if visDir != "" {
				p := filepath.Join(visDir, fmt.Sprintf("porcupine-key-%d.html", k.ID))
				if err := porcupine.VisualizePath(model, info, p); err == nil {
					v.Visualizations = append(v.Visualizations, p)
				}
			}
		case porcupine.Unknown:
			v.Unknown = append(v.Unknown, k.ID)
		}
	}
	sort.Ints(v.NonLinearizable)
	return v
}

// checkFinal compares key k's final read with its acknowledged writes.
func (v *Verdict) checkFinal(k Key, ops []Op) {
	var final *Op
	writes := map[uint64]Op{}
	for i, o := range ops {
		switch {
		case o.Kind == OpWrite:
			writes[o.Value] = o
		case o.Phase == "final" && o.Status == StatusOK:
			final = &ops[i]
		}
	}
	for _, o := range ops {
		if o.Kind == OpRead && o.Status == StatusOK && o.Value != 0 {
			if _, ok := writes[o.Value]; !ok {
				v.Phantom = append(v.Phantom, o.String())
			}
		}
	}
	if final == nil {
		v.Missing = append(v.Missing, fmt.Sprintf("key %d", k.ID))
		return
	}
	// The write the final read saw finished at done (never, for the
	// initial zeros: before everything). An acknowledged write that began
	// after done and yet is not what the key holds was lost.
	done := int64(math.MinInt64)
	if final.Value != 0 {
		w, ok := writes[final.Value]
		if !ok {
			return // a phantom, reported above
		}
		if w.Status != StatusOK {
			return // indeterminate: it may have taken effect last of all
		}
		done = w.Return
	}
	var lost []Op
	for _, w := range ops {
		if w.Kind == OpWrite && w.Status == StatusOK && w.Call > done && w.Value != final.Value {
			lost = append(lost, w)
		}
	}
	if len(lost) > 0 {
		v.LostWrites += len(lost)
		last := lost[len(lost)-1]
		what := "rewritten"
		if k.WriteOnce {
			what = "write-once"
		}
		v.Lost = append(v.Lost, fmt.Sprintf("key %d (%s, file %d offset %d): final read %s, but %d acknowledged writes began after that value was written, the last %v",
			k.ID, what, k.File, k.Off, FormatValue(final.Value), len(lost), last))
	}
}

// GetVisualizations is v.Visualizations, nil for a nil verdict.
func (v *Verdict) GetVisualizations() []string {
	if v == nil {
		return nil
	}
	return v.Visualizations
}
