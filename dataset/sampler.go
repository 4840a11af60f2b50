package dataset

import (
	"math/bits"

	"github.com/sluicefs/sluice/internal/mix"
)

// Permutation is a keyed bijection of [0, N): a balanced Feistel network on
// the smallest even-bit power of two that holds N, cycle-walked back into
// range. It costs O(1) memory and maps both ways.
type Permutation struct {
	n    uint64
	half uint   // bits per Feistel half
	mask uint64 // (1<<half)-1
	keys [rounds]uint64
}

const rounds = 12

// NewPermutation returns the permutation of [0, n) for (seed, epoch).
// shuffle=false gives the identity.
func NewPermutation(n uint64, seed uint64, epoch uint64, shuffle bool) *Permutation {
	p := &Permutation{n: n}
	if !shuffle || n < 2 {
		return p
	}
	b := uint(bits.Len64(n - 1))
	b += b & 1
	p.half = b / 2
	p.mask = 1<<p.half - 1
	k := mix.Mix64(seed ^ mix.Mix64(epoch+0x9e3779b97f4a7c15))
	for i := range p.keys {
		k = mix.Mix64(k + uint64(i) + 1)
		p.keys[i] = k
	}
	return p
}

// Len is N.
func (p *Permutation) Len() uint64 { return p.n }

// At is the sample at position pos (pos < N).
func (p *Permutation) At(pos uint64) uint64 {
	if p.half == 0 {
		return pos
	}
	x := p.encrypt(pos)
	for x >= p.n {
		x = p.encrypt(x)
	}
	return x
}

// Position is the position of sample s (s < N): the inverse of At.
func (p *Permutation) Position(s uint64) uint64 {
	if p.half == 0 {
		return s
	}
	x := p.decrypt(s)
	for x >= p.n {
		x = p.decrypt(x)
	}
	return x
}

func (p *Permutation) encrypt(x uint64) uint64 {
	l, r := x>>p.half, x&p.mask
	for _, k := range p.keys {
		l, r = r, l^(mix.Mix64(r^k)&p.mask)
	}
	return l<<p.half | r
}

func (p *Permutation) decrypt(x uint64) uint64 {
	l, r := x>>p.half, x&p.mask
	for i := rounds - 1; i >= 0; i-- {
		l, r = r^(mix.Mix64(l^p.keys[i])&p.mask), l
	}
	return l<<p.half | r
}
