package mm2go.interop;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import javax.security.auth.callback.Callback;
import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;

import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler;
import software.amazon.msk.auth.iam.internals.AWS4SignedPayloadGenerator;
import software.amazon.msk.auth.iam.internals.AuthenticationRequestParams;
import software.amazon.msk.auth.iam.internals.UserAgentUtils;

/** The msk-iam command: what aws-msk-iam-auth sends to Amazon MSK, for mm2go's interop test. */
final class MskIam {
    private MskIam() {
    }

    static String run(String[] args) throws Exception {
        if (args.length != 2) {
            throw new IllegalArgumentException("msk-iam takes HOST");
        }
        // AWS_MSK_IAM: the payload IAMSaslClient sends as its first response.
        AuthenticationRequestParams params = AuthenticationRequestParams.create(args[1],
            DefaultCredentialsProvider.create().resolveCredentials(), UserAgentUtils.getUserAgentValue());
        String payload = new String(new AWS4SignedPayloadGenerator().signedPayload(params), StandardCharsets.UTF_8);

        // OAUTHBEARER: the login callback handler as Kafka's login module calls it.
        IAMOAuthBearerLoginCallbackHandler handler = new IAMOAuthBearerLoginCallbackHandler();
        handler.configure(Map.of(), OAuthBearerLoginModule.OAUTHBEARER_MECHANISM, List.of(new AppConfigurationEntry(
            OAuthBearerLoginModule.class.getName(), AppConfigurationEntry.LoginModuleControlFlag.REQUIRED, Map.of())));
        OAuthBearerTokenCallback cb = new OAuthBearerTokenCallback();
        handler.handle(new Callback[] {cb});
        handler.close();

        Interop.Json j = new Interop.Json();
        j.open('{').key("payload").str(payload).key("token").str(cb.token().value()).close('}');
        return j.toString();
    }
}
