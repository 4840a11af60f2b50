// Package dataset turns files in Sluice into training batches: manifests,
// importers, the keyed-permutation sampler, the IO planner, the batcher that
// fills Arrow record batches in registered memory, prefetch and resumable
// loader state.
//
// Not built yet: see the datasets issue. It imports sdk and below.
package dataset
