// Package metric lets several instances of a worker share one set of
// Prometheus collectors on a registry.
//
// A daemon runs one replicator, checkpointer and heartbeat emitter per flow
// and builds them anew when a flow restarts; their metrics carry a flow
// label, so all instances must share the collectors registered first.
package metric

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Shared registers c with reg and returns it, or returns the equal
// collector registered before. A nil reg registers nothing. It panics only
// on a programming error: a different collector under the same name.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
