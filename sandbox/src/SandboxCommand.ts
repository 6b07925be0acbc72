/**
 * `crm-sync sandbox`: runs the CRM sandbox until interrupted, after printing its address, a
 * write-enabled personal access token and the OAuth app's credentials. The command's flags are in
 * cli.ts, which loads this module only when the command runs; `npm start -w sandbox -- [flags]`
 * runs it alone (main.ts).
 */
import { Clock, Console, Effect, Option } from "effect"
import type { SandboxOptions } from "./Options.ts"
import { Sandbox } from "./Sandbox.ts"

export interface SandboxCommandInput {
  readonly port: number
  readonly host: string
  readonly records: number
  readonly seed: number
  readonly window: string
  readonly debounce: string
  readonly webhookHeaderPrefix: "hook" | "webhook" | "svix"
  readonly adminToken: Option.Option<string>
  readonly companies?: Option.Option<number>
  readonly booksPerCompany?: Option.Option<number>
  readonly usersPerCompany?: Option.Option<number>
  readonly recordsPerCompany?: Option.Option<number>
  readonly overlap?: Option.Option<number>
  readonly userTokens?: boolean
}

/** `{ [key]: value }` when the flag was given, `{}` otherwise. */
const given = <K extends string, A>(key: K, value: Option.Option<A> | undefined): { readonly [P in K]?: A } =>
  value !== undefined && Option.isSome(value) ? ({ [key]: value.value } as { readonly [P in K]?: A }) : {}

export const toSandboxOptions = (input: SandboxCommandInput): SandboxOptions => ({
  port: input.port,
  host: input.host,
  records: input.records,
  seed: input.seed,
  window: input.window,
  debounce: input.debounce,
  webhookHeaderPrefix: input.webhookHeaderPrefix,
  ...(Option.isSome(input.adminToken) ? { adminToken: input.adminToken.value } : {}),
  ...given("companies", input.companies),
  ...given("booksPerCompany", input.booksPerCompany),
  ...given("usersPerCompany", input.usersPerCompany),
  ...given("recordsPerCompany", input.recordsPerCompany),
  ...given("overlap", input.overlap),
  ...(input.userTokens === true ? { userTokens: true } : {})
})

/** Starts the sandbox and keeps it up until the process is interrupted. */
export const runSandbox = Effect.fn("SandboxCommand.run")(function* (input: SandboxCommandInput) {
  const started = yield* Clock.currentTimeMillis
  return yield* Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const ready = (yield* Clock.currentTimeMillis) - started
    const { credentials, baseUrl } = sandbox
    const heapMb = Math.round(process.memoryUsage().heapUsed / 1_048_576)
    const authorize = new URL("/oauth/authorize", baseUrl)
    authorize.search = new URLSearchParams({
      response_type: "code",
      client_id: credentials.oauthClientId,
      redirect_uri: credentials.oauthRedirectUris[0]!,
      state: "xyz",
      code_challenge: "<base64url(sha256(verifier))>",
      code_challenge_method: "S256"
    }).toString()
    yield* Console.log(
      [
        `CRM sandbox ready at ${baseUrl} in ${ready} ms (${sandbox.options.records} records, seed ${sandbox.options.seed}, heap ${heapMb} MB)`,
        ``,
        `  CRM_BASE_URL=${baseUrl}`,
        `  CRM_TOKEN=${credentials.personalAccessToken}`,
        `  CRM_TOKEN_KIND=personal`,
        ``,
        `  personal access token (write-enabled, user ${credentials.userId}, company ${credentials.companyId}):`,
        `    ${credentials.personalAccessToken}`,
        `  OAuth app (sandbox mode, owner company ${credentials.companyId}):`,
        `    client_id     ${credentials.oauthClientId}`,
        `    client_secret ${credentials.oauthClientSecret}`,
        `    redirect_uris ${credentials.oauthRedirectUris.join(" ")}`,
        `    authorize     ${authorize.toString().replace(/%3C.*%3E/, "<S256 challenge>")}`,
        `    token         ${baseUrl}/oauth/token`,
        `  admin API:      ${baseUrl}/_sandbox${sandbox.options.adminToken === undefined ? "" : " (bearer admin token required)"}`,
        ...(sandbox.options.userTokens
          ? [
              `  user tokens:    one per user and company (${sandbox.options.companies} companies): GET ${baseUrl}/_sandbox/tokens`
            ]
          : []),
        ``,
        `  try: curl -H "Authorization: Bearer ${credentials.personalAccessToken}" "${baseUrl}/v1/financial_accounts?per_page=100&page=2"`
      ].join("\n")
    )
    return yield* Effect.never
  }).pipe(Effect.provide(Sandbox.layer(toSandboxOptions(input))))
})
