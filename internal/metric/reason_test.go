package metric

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{kerr.TopicAuthorizationFailed, ReasonAuthorization},
		{kerr.GroupAuthorizationFailed, ReasonAuthorization},
		{kerr.ClusterAuthorizationFailed, ReasonAuthorization},
		{kerr.TransactionalIDAuthorizationFailed, ReasonAuthorization},
		{fmt.Errorf("produce to t[0]: %w", kerr.TopicAuthorizationFailed), ReasonAuthorization},
		{context.DeadlineExceeded, ReasonTimeout},
		{kerr.RequestTimedOut, ReasonTimeout},
		{kerr.MessageTooLarge, ReasonRecordTooLarge},
		{kerr.RecordListTooLarge, ReasonRecordTooLarge},
		{kgo.ErrClientClosed, "step"},
		{kerr.UnknownTopicOrPartition, "step"},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			require.Equal(t, tc.want, Reason(tc.err, "step"))
		})
	}
}
