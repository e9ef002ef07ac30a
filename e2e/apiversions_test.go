package e2e

import (
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/config"
)

// connections counts a client's new connections and ApiVersions requests.
type connections struct {
	mu                    sync.Mutex
	opened, apiVersionsRq int
}

func (c *connections) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		c.mu.Lock()
		c.opened++
		c.mu.Unlock()
	}
}

func (c *connections) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.ApiVersions) && err == nil {
		c.mu.Lock()
		c.apiVersionsRq++
		c.mu.Unlock()
	}
}

// TestIntegrationOneApiVersionsPerConnection: a client mm2go builds from the
// file opens a connection to the test bed's Kafka with one ApiVersions
// request, not two (franz-go asks at a version newer than the broker knows
// unless told otherwise, and asks again at the broker's): across regions
// each is a round trip, several of them in turn as a flow starts.
func TestIntegrationOneApiVersionsPerConnection(t *testing.T) {
	firstPassOnly(func(t *testing.T) {
		e := newEnv(t)
		data, err := os.ReadFile(e.config())
		require.NoError(t, err)
		cfg, _, err := config.Parse(data, t.TempDir())
		require.NoError(t, err)
		var c connections
		cl, err := kgo.NewClient(append(cfg.Flow(e.src, e.dst).Client(config.RoleSourceAdmin).Opts(), kgo.WithHooks(&c))...)
		require.NoError(t, err)
		defer cl.Close()
		ctx := e.ctx()
		// A seed connection, then one to each broker it names.
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{} // none; nil asks for all
		md, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		for _, b := range md.Brokers {
			_, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
			require.NoError(t, err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		require.GreaterOrEqual(t, c.opened, 1+len(md.Brokers))
		require.Equal(t, c.opened, c.apiVersionsRq, "ApiVersions requests per connection opened")
	})(t)
}
