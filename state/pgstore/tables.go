package pgstore

import (
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/state/config"
)

// queueTables queues the statements that replace the current-document
// tables (buckets, engine_groups, workers, config_settings) with doc's.
func queueTables(b *pgx.Batch, doc *config.Document) error {
	b.Queue(`DELETE FROM engine_groups`)
	b.Queue(`DELETE FROM buckets`)
	b.Queue(`DELETE FROM workers`)
	b.Queue(`DELETE FROM config_settings`)
	for i, w := range doc.Engines {
		models, err := json.Marshal(w.Models)
		if err != nil {
			return err
		}
		labels, err := jsonOrNil(w.Labels, len(w.Labels) == 0)
		if err != nil {
			return err
		}
		adapters, err := jsonOrNil(w.LoRAAdapters, len(w.LoRAAdapters) == 0)
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO workers (id, position, url, role, models, bootstrap_port, labels,
			kv_events_endpoint, kv_replay_endpoint, metrics_url, dp_size, lora_adapters)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			w.ID, i, w.URL, w.Role, models, nullable(int64(w.BootstrapPort)), labels,
			nullableString(w.KVEventsEndpoint), nullableString(w.KVReplayEndpoint), nullableString(w.MetricsURL),
			nullable(int64(w.DPSize)), adapters)
	}
	for i, bk := range doc.EffectiveBuckets() {
		kind := "plain"
		if bk.Groups.PD != nil {
			kind = "pd"
		}
		models, err := jsonOrNil(bk.Models, bk.Models == nil)
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO buckets (id, position, rank, kind, models, min_tokens, max_tokens, max_context_tokens)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, bk.ID, i, bk.Rank, kind, models, bk.Limits.Min, bk.Limits.Max, bk.MaxContextTokens)
		groups := map[string]*config.GroupSpec{}
		if bk.Groups.Plain != nil {
			groups[config.StagePlain] = bk.Groups.Plain
		}
		if pd := bk.Groups.PD; pd != nil {
			groups[config.StagePrefill], groups[config.StageDecode] = pd.Prefill, pd.Decode
		}
		for stage, g := range groups {
			if g == nil {
				continue
			}
			var ids, policy, admission []byte
			if g.EngineIDs != nil {
				if ids, err = json.Marshal(*g.EngineIDs); err != nil {
					return err
				}
			}
			if g.Policy != nil {
				p := g.Policy.Clone()
				if p.Admission != nil {
					if admission, err = json.Marshal(p.Admission); err != nil {
						return err
					}
				}
				p.Admission = nil
				if policy, err = json.Marshal(p); err != nil {
					return err
				}
			}
			b.Queue(`INSERT INTO engine_groups (bucket_id, stage, worker_ids, policy, admission) VALUES ($1, $2, $3, $4, $5)`,
				bk.ID, stage, ids, policy, admission)
		}
	}
	defaults, err := jsonOrNil(doc.DefaultPolicy, doc.DefaultPolicy == nil)
	if err != nil {
		return err
	}
	models, err := jsonOrNil(doc.Models, doc.Models == nil)
	if err != nil {
		return err
	}
	b.Queue(`INSERT INTO config_settings (singleton, workers_declared, default_policy, models) VALUES (true, $1, $2, $3)`,
		doc.Engines != nil, defaults, models)
	return nil
}

func jsonOrNil(v any, isNil bool) ([]byte, error) {
	if isNil {
		return nil, nil
	}
	return json.Marshal(v)
}
