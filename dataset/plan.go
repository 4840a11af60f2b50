package dataset

import "fmt"

// plan deals the positions of one epoch not yet consumed to the ranks: full
// steps of batch positions per rank in lockstep, then (unless dropLast) one
// final partial step splitting the remainder as evenly as possible, so all
// ranks take the same number of steps and nothing is repeated.
type plan struct {
	n, start     int64 // samples in the epoch, positions already consumed
	world, rank  int
	batch        int
	dropLast     bool
	full, remain int64 // full steps per rank; positions left for the partial step
}

func newPlan(n, start int64, world, rank, batch int, dropLast bool) (plan, error) {
	switch {
	case batch <= 0:
		return plan{}, fmt.Errorf("batch size %d: must be positive", batch)
	case world <= 0 || rank < 0 || rank >= world:
		return plan{}, fmt.Errorf("rank %d of world size %d: out of range", rank, world)
	case start < 0 || start > n:
		return plan{}, fmt.Errorf("consumed %d of %d samples: out of range", start, n)
	}
	p := plan{n: n, start: start, world: world, rank: rank, batch: batch, dropLast: dropLast}
	per := int64(world) * int64(batch)
	p.full = (n - start) / per
	p.remain = (n - start) % per
	return p, nil
}

// steps is how many steps every rank takes.
func (p plan) steps() int64 {
	if p.remain > 0 && !p.dropLast {
		return p.full + 1
	}
	return p.full
}

// span is this rank's positions [lo, hi) at step s, and whether the step
// is the final partial one (it may then be empty for some ranks).
func (p plan) span(s int64) (lo, hi int64, partial bool) {
	per := int64(p.world) * int64(p.batch)
	if s < p.full {
		lo = p.start + s*per + int64(p.rank)*int64(p.batch)
		return lo, lo + int64(p.batch), false
	}
	base := p.start + p.full*per
	each, extra := p.remain/int64(p.world), p.remain%int64(p.world)
	r := int64(p.rank)
	lo = base + r*each + min(r, extra)
	hi = lo + each
	if r < extra {
		hi++
	}
	return lo, hi, true
}

// consumed is the epoch's position count after k steps of every rank; a
// finished epoch counts as all of it, so resuming it (even on another
// world size) delivers nothing more.
func (p plan) consumed(k int64) int64 {
	if k >= p.steps() {
		return p.n // a finished epoch is done, whatever DropLast left out
	}
	return p.start + k*int64(p.world)*int64(p.batch)
}
