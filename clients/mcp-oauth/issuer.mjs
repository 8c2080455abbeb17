// The authorization server of oauth-flow.mjs: oidc-provider (npm) on 127.0.0.1, configured
// with dynamic client registration, PKCE required (S256) and resource indicators whose access
// tokens are JWTs (RS256) for one resource, Carmy's, with the scope `carmy`. Login and consent
// are answered at /interaction/<uid> for the user named by the request's x-test-user header
// (the test's user agent sets it): no pages, no passwords — the test plays the user.
import { generateKeyPairSync, randomUUID } from "node:crypto";
import http from "node:http";
import Provider, { errors } from "oidc-provider";

export async function startIssuer(port, resource) {
  const issuer = `http://127.0.0.1:${port}`;
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const jwk = { ...privateKey.export({ format: "jwk" }), kid: randomUUID(), use: "sig", alg: "RS256" };
  const provider = new Provider(issuer, {
    jwks: { keys: [jwk] },
    findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo(_ctx, indicator) {
          if (indicator !== resource) {
            throw new errors.InvalidTarget();
          }
          return {
            scope: "carmy",
            audience: resource,
            accessTokenFormat: "jwt",
            accessTokenTTL: 300,
            jwt: { sign: { alg: "RS256" } },
          };
        },
      },
    },
    pkce: { required: () => true },
    scopes: ["carmy"],
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  });
  const handler = provider.callback();
  const server = http.createServer(async (req, res) => {
    if (!req.url.startsWith("/interaction/")) {
      return handler(req, res);
    }
    try {
      const details = await provider.interactionDetails(req, res);
      const user = req.headers["x-test-user"];
      if (details.prompt.name === "login") {
        return await provider.interactionFinished(req, res, { login: { accountId: user } });
      }
      const grant = details.grantId
        ? await provider.Grant.find(details.grantId)
        : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
      // Consent to exactly what the prompt says is missing (oidc-provider's grant model).
      const missing = details.prompt.details;
      if (missing.missingOIDCScope) {
        grant.addOIDCScope(missing.missingOIDCScope.join(" "));
      }
      for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
        grant.addResourceScope(indicator, scopes.join(" "));
      }
      const grantId = await grant.save();
      return await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    } catch (error) {
      res.statusCode = 500;
      res.end(String(error?.stack ?? error));
    }
  });
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
}
