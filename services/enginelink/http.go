package enginelink

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpServer serves /metrics, /healthz (the process runs) and /readyz (the engine list is known
// and Kafka is not failing).
func (l *Link) httpServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(l.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !l.ready.Load():
			http.Error(w, "not ready: engine list not loaded yet (fleet mode reads the decider's registry)", http.StatusServiceUnavailable)
		case !l.prod.healthy():
			http.Error(w, "not ready: Kafka writes are failing", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ready\n"))
		}
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}
