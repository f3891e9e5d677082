package deciderserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/state/pgstore"
)

// registerConfigMetrics exports when the configuration in force was applied and, for the
// Postgres store, the state of its reload listener.
func (s *Server) registerConfigMetrics(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_decider_config_applied_timestamp_seconds",
		Help: "Unix time the configuration in force was applied on this replica.",
	}, func() float64 { return float64(s.configApplied.Load()) / 1e9 }))
	pg, ok := s.store.(*pgstore.Store)
	if !ok {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_config_listener_connected",
			Help: "1 while the Postgres LISTEN connection that reloads configuration is up and has answered within ping interval + query timeout; 0 means this replica may be serving a stale configuration.",
		}, func() float64 {
			if pg.ListenerStats().Connected {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_config_listener_reconnects_total",
			Help: "Times the configuration listener lost its connection and reconnected.",
		}, func() float64 { return float64(pg.ListenerStats().Reconnects) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_config_listener_last_contact_timestamp_seconds",
			Help: "Unix time the configuration listener's Postgres connection last answered (0 = never).",
		}, func() float64 {
			if t := pg.ListenerStats().LastContact; !t.IsZero() {
				return float64(t.UnixNano()) / 1e9
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_config_listener_last_reload_timestamp_seconds",
			Help: "Unix time the listener last loaded the version in force from Postgres (0 = never).",
		}, func() float64 {
			if t := pg.ListenerStats().LastReload; !t.IsZero() {
				return float64(t.UnixNano()) / 1e9
			}
			return 0
		}),
	)
}
