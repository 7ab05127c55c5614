package kafka

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// ClientMetrics reports the Kafka client's own metrics (franz-go's kprom
// plugin: connections, bytes read and written, and per broker and topic the
// batches, records and uncompressed bytes produced and fetched, buffered
// records) as sink_kafka_* on reg. Add it to ClientConfig.ExtraOpts.
func ClientMetrics(reg *prometheus.Registry) kgo.Opt {
	return kgo.WithHooks(kprom.NewMetrics("sink_kafka", kprom.Registry(reg),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Batches, kprom.Records, kprom.UncompressedBytes, kprom.ConsistentNaming)))
}
