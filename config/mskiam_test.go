package config

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"
)

func iamFile(mech, jaas string, extra ...string) string {
	return twoClusters + "a.security.protocol = SASL_SSL\na.sasl.mechanism = " + mech + "\n" +
		"a.sasl.jaas.config = " + jaas + "\n" + strings.Join(extra, "\n") + "\n"
}

func TestMSKIAMConfig(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		err        string // "" when the file loads
		info       string // a message at info level
	}{
		{name: "AWS_MSK_IAM, default credentials", file: iamFile("AWS_MSK_IAM", iamLoginModule+" required;",
			"a.sasl.client.callback.handler.class = "+iamClientCallback)},
		{name: "AWS_MSK_IAM, profile and role", file: iamFile("AWS_MSK_IAM",
			iamLoginModule+` required awsProfileName="prod" awsRoleArn="arn:aws:iam::123456789012:role/mm2go" awsRoleSessionName="mm2go" awsStsRegion="eu-west-1";`)},
		{name: "Java-only options are reported", file: iamFile("AWS_MSK_IAM", iamLoginModule+` required awsDebugCreds=true awsMaxRetries="5";`),
			info: "option awsDebugCreds ignored"},
		{name: "unknown option", file: iamFile("AWS_MSK_IAM", iamLoginModule+` required awsProfile="prod";`),
			err: "unknown IAMLoginModule options awsProfile"},
		{name: "role key without secret", file: iamFile("AWS_MSK_IAM", iamLoginModule+` required awsRoleArn="arn:aws:iam::1:role/r" awsRoleAccessKeyId="AKID";`),
			err: "awsRoleAccessKeyId and awsRoleSecretAccessKey go together"},
		{name: "wrong login module", file: iamFile("AWS_MSK_IAM", scramLoginModule+` required username="u" password="p";`),
			err: "login module does not match sasl.mechanism AWS_MSK_IAM"},
		{name: "no JAAS", file: twoClusters + "a.security.protocol = SASL_SSL\na.sasl.mechanism = AWS_MSK_IAM\n",
			err: iamLoginModule + " required;"},
		{name: "OAUTHBEARER with the IAM handler", file: iamFile("OAUTHBEARER", oauthLoginModule+" required;",
			"a.sasl.login.callback.handler.class = "+iamOAuthCallback)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, ws, err := load(t, tt.file, nil, t.TempDir())
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			found := tt.info == ""
			for _, w := range ws {
				require.NotEqual(t, LevelWarn, w.Level, "%s: %s", w.Key, w.Message)
				found = found || strings.Contains(w.Message, tt.info)
			}
			require.True(t, found, "no message %q in %v", tt.info, ws)
			require.NotNil(t, c.Flow("a", "b").Client(RoleSourceConsumer).Opts())
		})
	}
}

// TestMSKIAMToken checks the OAUTHBEARER token's shape: the base64url of a
// presigned URL of kafka.<region>.amazonaws.com, as the Java library makes
// it (its byte-for-byte equality with the Java library's token is
// e2e's TestIntegrationMSKIAMInterop).
func TestMSKIAMToken(t *testing.T) {
	at := time.Date(2026, 12, 3, 1, 2, 3, 0, time.UTC)
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", SessionToken: "session/token+="}
	tok, err := iamToken(context.Background(), creds, "eu-west-1", "mm2go", at)
	require.NoError(t, err)
	require.NotContains(t, tok, "=", "no padding")
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err)
	u, err := url.Parse(string(raw))
	require.NoError(t, err)
	require.Equal(t, "https", u.Scheme)
	require.Equal(t, "kafka.eu-west-1.amazonaws.com", u.Host)
	require.Empty(t, u.Path)
	q := u.Query()
	require.Equal(t, "kafka-cluster:Connect", q.Get("Action"))
	require.Equal(t, "AWS4-HMAC-SHA256", q.Get("X-Amz-Algorithm"))
	require.Equal(t, "AKIDEXAMPLE/20261203/eu-west-1/kafka-cluster/aws4_request", q.Get("X-Amz-Credential"))
	require.Equal(t, "20261203T010203Z", q.Get("X-Amz-Date"))
	require.Equal(t, "900", q.Get("X-Amz-Expires"))
	require.Equal(t, "host", q.Get("X-Amz-SignedHeaders"))
	require.Equal(t, "session/token+=", q.Get("X-Amz-Security-Token"))
	require.Len(t, q.Get("X-Amz-Signature"), 64)
	require.Equal(t, "mm2go", q.Get("User-Agent"))
	require.True(t, strings.HasSuffix(string(raw), "&User-Agent=mm2go"), "User-Agent last, as the Java library appends it: %s", raw)

	again, err := iamToken(context.Background(), creds, "eu-west-1", "mm2go", at)
	require.NoError(t, err)
	require.Equal(t, tok, again, "deterministic for one time")
	other, err := iamToken(context.Background(), aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "other"}, "eu-west-1", "mm2go", at)
	require.NoError(t, err)
	require.NotEqual(t, tok, other)
}

// TestMSKIAMCredentials: the profile's credentials from the shared files,
// resolved when a connection authenticates; a missing profile is an error
// that names it.
func TestMSKIAMCredentials(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"credentials": []byte("[prod]\naws_access_key_id = AKIDPROD\naws_secret_access_key = prodsecret\n")})
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	var errs []string
	m := newMSKIAM(map[string]string{"awsProfileName": "prod"}, func(f string, _ ...any) { errs = append(errs, f) }, func(string) {})
	require.Empty(t, errs)
	c, err := m.retrieve(context.Background())
	require.NoError(t, err)
	require.Equal(t, "AKIDPROD", c.AccessKeyID)
	require.Equal(t, "prodsecret", c.SecretAccessKey)

	m = newMSKIAM(map[string]string{"awsProfileName": "missing"}, func(f string, _ ...any) { errs = append(errs, f) }, func(string) {})
	_, err = m.retrieve(context.Background())
	require.ErrorContains(t, err, "missing")
}
