//go:build verbs

package verbs

import (
	"errors"
	"sort"

	"github.com/sluicefs/sluice/fabric"
)

type localRegion struct {
	start, end uintptr
	mem        *memoryRegion
}

func (ep *Endpoint) addLocal(m *memoryRegion) {
	ep.lmu.Lock()
	defer ep.lmu.Unlock()
	start := addrOf(m.buf)
	ep.locals = append(ep.locals, &localRegion{start: start, end: start + uintptr(len(m.buf)), mem: m})
	sort.Slice(ep.locals, func(i, j int) bool { return ep.locals[i].start < ep.locals[j].start })
}

func (ep *Endpoint) removeLocal(m *memoryRegion) {
	ep.lmu.Lock()
	defer ep.lmu.Unlock()
	for i, l := range ep.locals {
		if l.mem == m {
			ep.locals = append(ep.locals[:i], ep.locals[i+1:]...)
			return
		}
	}
}

// findLocal returns the lkey of the registered region holding b and the
// address a scatter entry uses for b, if b is registered memory.
func (ep *Endpoint) findLocal(b []byte) (uint32, uintptr, bool) {
	a := addrOf(b)
	ep.lmu.RLock()
	defer ep.lmu.RUnlock()
	i := sort.Search(len(ep.locals), func(i int) bool { return ep.locals[i].end > a })
	if i < len(ep.locals) && ep.locals[i].start <= a && a+uintptr(len(b)) <= ep.locals[i].end {
		m := ep.locals[i].mem
		return m.lkey(), m.localAddr(b), true
	}
	return 0, 0, false
}

// mr is a registered region: the software table's entry and the NIC's.
type mr struct {
	fabric.MR
	ep  *Endpoint
	mem *memoryRegion
}

// RegisterMemory registers buf with the NIC for the given remote access.
// buf must be C or mmap memory (AllocMemory), never Go heap memory.
func (ep *Endpoint) RegisterMemory(buf []byte, access fabric.Access) (fabric.MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("fabric/verbs: register an empty buffer")
	}
	if err := ep.enter(); err != nil {
		return nil, err
	}
	defer ep.wg.Done()
	mem, err := ep.dev.register(buf, access&fabric.AccessRemoteRead != 0, access&fabric.AccessRemoteWrite != 0)
	if err != nil {
		return nil, err
	}
	fmr, err := ep.regions.RegisterTagged(buf, access, mem.rkey())
	if err != nil {
		mem.deregister()
		return nil, err
	}
	ep.addLocal(mem)
	m := &mr{MR: fmr, ep: ep, mem: mem}
	ep.lmu.Lock()
	ep.mrs[m] = struct{}{}
	ep.lmu.Unlock()
	return m, nil
}

// Deregister revokes the key (in the table and on the NIC). After the
// endpoint closed, the NIC registration is already gone.
func (m *mr) Deregister() error {
	if err := m.MR.Deregister(); err != nil {
		return err
	}
	m.ep.removeLocal(m.mem)
	m.ep.lmu.Lock()
	_, live := m.ep.mrs[m]
	delete(m.ep.mrs, m)
	m.ep.lmu.Unlock()
	if !live {
		return nil
	}
	return m.mem.deregister()
}
