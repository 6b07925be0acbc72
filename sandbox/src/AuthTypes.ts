/**
 * The credentials the sandbox holds and what its credential operations work with, shared by
 * Auth.ts (tokens, apps, the service) and OAuthFlow.ts (the authorization-code flow).
 */
import type { ResolvedOptions } from "./Options.ts"
import type { SandboxClock } from "./SandboxClock.ts"
import type { SandboxStore } from "./Store.ts"

export interface PersonalToken {
  readonly id: string
  readonly token: string
  readonly userId: string
  readonly company: number
  readonly label: string
  canWrite: boolean
  revoked: boolean
}

export interface OAuthApp {
  readonly clientId: string
  clientSecret: string
  readonly name: string
  redirectUris: ReadonlyArray<string>
  readonly ownerCompany: number
  /** `sandbox`: connections only to the owner's company (spec §5.5). */
  mode: "sandbox" | "production"
  enabled: boolean
  readonly scope: string
}

export interface TokenResponse {
  readonly access_token: string
  readonly token_type: "Bearer"
  readonly expires_in: number
  readonly refresh_token: string
  readonly refresh_token_expires_in: number
  readonly scope: string
  readonly company_id: string
  readonly created_at: number
}

export interface ConnectionKey {
  readonly clientId: string
  readonly userId: string
  readonly company: number
}

export interface AuthorizationCode {
  readonly clientId: string
  readonly userId: string
  readonly company: number
  readonly redirectUri: string
  readonly challenge: string
  readonly scope: string
  readonly expiresAt: number
  used: boolean
  /** The token family issued from this code, revoked if the code is replayed. */
  family: string | undefined
}

export interface IssuedToken {
  readonly clientId: string
  readonly userId: string
  readonly company: number
  readonly scope: string
  readonly expiresAt: number
  readonly family: string
  revoked: boolean
  /** Refresh tokens only: when it was exchanged (rotation makes it single-use). */
  usedAt: number | undefined
}

/** Every credential the sandbox holds; `install` puts back the bootstrap ones after a reset. */
export interface AuthState {
  readonly pats: Map<string, PersonalToken>
  readonly apps: Map<string, OAuthApp>
  readonly codes: Map<string, AuthorizationCode>
  readonly accessTokens: Map<string, IssuedToken>
  readonly refreshTokens: Map<string, IssuedToken>
  /** The user the sandbox signs in as at `/oauth/authorize` when no `login_hint` is given. */
  approver: string
  bootstrap: { readonly pat: PersonalToken; readonly app: OAuthApp }
  /** Token families issued so far. */
  counter: number
  patCounter: number
}

/** What the credential operations work with: the options, the sandbox clock and world, the credentials held. */
export interface AuthDeps {
  readonly options: ResolvedOptions
  readonly clock: SandboxClock["Service"]
  readonly store: SandboxStore["Service"]
  readonly state: AuthState
}
