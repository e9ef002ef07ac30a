package metric

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The reason labels every worker's error counter shares. Error text never
// becomes a label value: a reason is one of a small, stable set that
// dashboards and alerts match on.
const (
	ReasonAuthorization  = "authorization"    // the principal lacks a permission
	ReasonTimeout        = "timeout"          // a request or its deadline timed out
	ReasonRecordTooLarge = "record_too_large" // the target refused a record or batch for its size
)

// Reason classifies err into one of the shared reasons, or returns
// fallback, the reason of the step that failed (fetch, produce, ...).
func Reason(err error, fallback string) string {
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return ReasonAuthorization
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return ReasonRecordTooLarge
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kerr.RequestTimedOut):
		return ReasonTimeout
	default:
		return fallback
	}
}
