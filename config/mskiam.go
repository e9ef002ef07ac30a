package config

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/twmb/franz-go/pkg/sasl"
	awssasl "github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// Amazon MSK's IAM access control, as Amazon's aws-msk-iam-auth library
// does it for Java clients, in its two forms:
//
//   - sasl.mechanism=AWS_MSK_IAM with IAMLoginModule: the first SASL message
//     is a SigV4-signed "kafka-cluster:Connect" request for the broker's
//     host (franz-go's pkg/sasl/aws, checked against the Java library by
//     e2e's TestIntegrationMSKIAMInterop);
//   - sasl.mechanism=OAUTHBEARER with IAMOAuthBearerLoginCallbackHandler: the
//     token is the base64url of a presigned https://kafka.<region>.amazonaws.com
//     URL of the same request.
//
// Credentials come from the AWS SDK for Go's default chain (environment,
// shared config and credentials files and their profiles, web identity /
// IRSA, ECS and EC2 metadata), from the JAAS option awsProfileName's
// profile, or from assuming awsRoleArn with STS; the SDK caches them and
// fetches them again before they expire. They are resolved when a
// connection authenticates, not when the file is read.

const (
	iamLoginModule      = "software.amazon.msk.auth.iam.IAMLoginModule"
	iamClientCallback   = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
	iamOAuthCallback    = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
	iamService          = "kafka-cluster"
	iamDefaultSession   = "aws-msk-iam-auth" // the Java library's role session name
	iamTokenLifetime    = 15 * time.Minute   // X-Amz-Expires, as the Java library signs
	iamEmptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// iamOptions are the JAAS options of IAMLoginModule (and of
// OAuthBearerLoginModule with the IAM callback handler) that mm2go reads.
var iamOptions = map[string]bool{
	"awsProfileName": true, "awsRoleArn": true, "awsRoleSessionName": true, "awsStsRegion": true,
	"awsRoleExternalId": true, "awsRoleAccessKeyId": true, "awsRoleSecretAccessKey": true,
	"awsRoleSessionToken": true,
	// Java-only knobs with no effect here (debug logging, FIPS endpoints,
	// the Java SDK's retries and default providers).
	"awsDebugCreds": false, "awsShouldUseFips": false, "awsMaxRetries": false, "awsMaxBackOffTimeMs": false,
	"awsAddDefaultProviders": false,
}

// mskIAM resolves AWS credentials for one cluster.
type mskIAM struct {
	profile, roleARN, session, stsRegion, externalID string
	roleKey                                          string
	roleSecret, roleToken                            Secret
	// load reads the AWS SDK's shared configuration; a test replaces it.
	load func(ctx context.Context, opts ...func(*awsconfig.LoadOptions) error) (aws.Config, error)

	once  sync.Once
	creds aws.CredentialsProvider
	cfg   aws.Config
	err   error
}

// newMSKIAM reads the JAAS options; unknown ones are errors, Java-only ones
// are reported as ignored.
func newMSKIAM(options map[string]string, fail func(string, ...any), ignored func(string)) *mskIAM {
	var unknown []string
	for k := range options {
		use, known := iamOptions[k]
		switch {
		case !known:
			unknown = append(unknown, k)
		case !use:
			ignored(k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		fail("unknown IAMLoginModule options %s (want awsProfileName, awsRoleArn, awsRoleSessionName, awsStsRegion, awsRoleExternalId, awsRoleAccessKeyId, awsRoleSecretAccessKey, awsRoleSessionToken)", strings.Join(unknown, ", "))
	}
	m := &mskIAM{
		profile: options["awsProfileName"], roleARN: options["awsRoleArn"], session: options["awsRoleSessionName"],
		stsRegion: options["awsStsRegion"], externalID: options["awsRoleExternalId"],
		roleKey: options["awsRoleAccessKeyId"], roleSecret: Secret(options["awsRoleSecretAccessKey"]),
		roleToken: Secret(options["awsRoleSessionToken"]), load: awsconfig.LoadDefaultConfig,
	}
	if m.session == "" {
		m.session = iamDefaultSession
	}
	if (m.roleKey == "") != (m.roleSecret == "") {
		fail("awsRoleAccessKeyId and awsRoleSecretAccessKey go together")
	}
	if m.roleKey != "" && m.roleARN == "" {
		fail("awsRoleAccessKeyId needs awsRoleArn: they are the credentials that assume the role")
	}
	return m
}

// provider builds the credentials provider once: as the Java library, the
// profile's credentials, else the role's, else the default chain.
func (m *mskIAM) provider(ctx context.Context) (aws.CredentialsProvider, aws.Config, error) {
	m.once.Do(func() {
		var opts []func(*awsconfig.LoadOptions) error
		if m.profile != "" {
			opts = append(opts, awsconfig.WithSharedConfigProfile(m.profile))
		}
		cfg, err := m.load(context.WithoutCancel(ctx), opts...)
		if err != nil {
			m.err = fmt.Errorf("load the AWS configuration: %w", err)
			return
		}
		m.cfg, m.creds = cfg, cfg.Credentials
		if m.roleARN == "" || m.profile != "" {
			return
		}
		base := cfg.Credentials
		if m.roleKey != "" {
			base = credentials.NewStaticCredentialsProvider(m.roleKey, m.roleSecret.Reveal(), m.roleToken.Reveal())
		}
		region := m.stsRegion
		if region == "" || region == "aws-global" {
			region = "us-east-1" // STS's global endpoint
		}
		client := sts.NewFromConfig(cfg, func(o *sts.Options) { o.Region, o.Credentials = region, base })
		m.creds = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(client, m.roleARN, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = m.session
			if m.externalID != "" {
				o.ExternalID = aws.String(m.externalID)
			}
		}))
	})
	return m.creds, m.cfg, m.err
}

// retrieve returns the current credentials.
func (m *mskIAM) retrieve(ctx context.Context) (aws.Credentials, error) {
	p, _, err := m.provider(ctx)
	if err != nil {
		return aws.Credentials{}, err
	}
	if p == nil {
		return aws.Credentials{}, errors.New("no AWS credentials: none in the environment, the shared files, web identity or instance metadata")
	}
	c, err := p.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("AWS credentials: %w", err)
	}
	return c, nil
}

// saslMechanism is AWS_MSK_IAM.
func (m *mskIAM) saslMechanism() sasl.Mechanism {
	return awssasl.ManagedStreamingIAM(func(ctx context.Context) (awssasl.Auth, error) {
		c, err := m.retrieve(ctx)
		if err != nil {
			return awssasl.Auth{}, err
		}
		return awssasl.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken, UserAgent: iamUserAgent()}, nil
	})
}

// oauthMechanism is OAUTHBEARER with IAMOAuthBearerLoginCallbackHandler.
func (m *mskIAM) oauthMechanism() sasl.Mechanism {
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		c, err := m.retrieve(ctx)
		if err != nil {
			return oauth.Auth{}, err
		}
		_, cfg, _ := m.provider(ctx)
		if cfg.Region == "" {
			return oauth.Auth{}, errors.New("no AWS region for the MSK IAM token: set AWS_REGION or the profile's region")
		}
		tok, err := iamToken(ctx, c, cfg.Region, iamUserAgent(), time.Now())
		return oauth.Auth{Token: tok}, err
	})
}

// iamToken is the OAUTHBEARER token of the IAM callback handler: the
// base64url (no padding) of the presigned URL
// https://kafka.<region>.amazonaws.com?Action=kafka-cluster%3AConnect&X-Amz-...&User-Agent=...
func iamToken(ctx context.Context, c aws.Credentials, region, userAgent string, now time.Time) (string, error) {
	host := "kafka." + region + ".amazonaws.com"
	params := url.Values{"Action": {iamService + ":Connect"}, "X-Amz-Expires": {fmt.Sprint(int(iamTokenLifetime.Seconds()))}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/?"+params.Encode(), nil)
	if err != nil {
		return "", err
	}
	signed, _, err := v4.NewSigner().PresignHTTP(ctx, c, req, iamEmptyPayloadHash, iamService, region, now.UTC())
	if err != nil {
		return "", fmt.Errorf("sign the MSK IAM token: %w", err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		return "", err
	}
	// The parameters in the Java library's order and encoding (RFC 3986:
	// a space is %20), its URL without a "/" path (the signature covers "/"
	// all the same).
	q := u.Query()
	var b strings.Builder
	b.WriteString("https://" + host + "?")
	for i, k := range []string{"Action", "X-Amz-Security-Token", "X-Amz-Algorithm", "X-Amz-Date", "X-Amz-SignedHeaders",
		"X-Amz-Expires", "X-Amz-Credential", "X-Amz-Signature"} {
		if !q.Has(k) {
			continue
		}
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + uriEscape(q.Get(k)))
	}
	b.WriteString("&User-Agent=" + uriEscape(userAgent))
	return base64.RawURLEncoding.EncodeToString([]byte(b.String())), nil
}

// uriEscape escapes a query value as RFC 3986 does (and the AWS SDKs).
func uriEscape(v string) string { return strings.ReplaceAll(url.QueryEscape(v), "+", "%20") }

// iamUserAgent names mm2go to MSK (the aws:UserAgent condition key).
func iamUserAgent() string { return "mm2go" }
