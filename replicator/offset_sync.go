package replicator

// syncDecider decides, per upstream partition, when MM2's offset-syncs
// topic gets a record (MM2's OffsetSyncWriter.PartitionState):
// for the first record of a lifetime, on an upstream gap, on a downstream
// rewind, and whenever the newest sync is offset.lag.max or more downstream
// offsets behind. Between those, the newest position is kept as "delayed"
// and written at the next progress flush, as MM2 does on every offset
// commit. mm2go's own translation does not need these records (it uses the
// exact offset map); they keep MM2's tools and checkpoint tasks working.
type syncDecider struct {
	lagMax                     int64
	prevUp, prevDown, lastSync int64
}

func newSyncDecider(lagMax int64) syncDecider {
	return syncDecider{lagMax: lagMax, prevUp: -1, prevDown: -1, lastSync: -1}
}

// update records that upstream offset up was written at downstream offset
// down and reports whether a sync must be sent now.
func (d *syncDecider) update(up, down int64) bool {
	must := d.lastSync == -1 ||
		down-(d.lastSync+1) >= d.lagMax ||
		up-d.prevUp != 1 ||
		down < d.prevDown
	if must {
		d.lastSync = down
	}
	d.prevUp, d.prevDown = up, down
	return must
}
