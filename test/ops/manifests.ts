/**
 * Checks of the shipped manifests as a platform team's tooling would parse them (the `yaml`
 * package, every document): each object has the shape its `apiVersion`/`kind` claims, every
 * container runs a real `crm-sync` command with environment variables crm-sync reads (or that the
 * config file names), every port a probe, Service or NetworkPolicy names is one the pod declares,
 * and declared ports agree with CRM_SYNC_WEBHOOK_PORT / CRM_SYNC_ADMIN_PORT; every pod meets the "restricted" Pod
 * Security Standard (a numeric non-root user, seccomp RuntimeDefault, no privilege escalation,
 * every capability dropped) with a read-only root filesystem, and names its image's pull policy; a
 * Job cleans up after itself. `problems` returns what is wrong (empty: nothing), so a test can show
 * a broken manifest failing.
 */
import { parseAllDocuments } from "yaml"
import { v8FlagsFor } from "../../bin/v8-flags.js"

type Json = Record<string, any>

/** apiVersion and the fields every object of a kind must have (the Kubernetes API's required ones). */
const shapes: Record<string, { readonly apiVersion: string; readonly required: ReadonlyArray<string> }> = {
  Deployment: { apiVersion: "apps/v1", required: ["spec.selector", "spec.template.spec.containers"] },
  Job: { apiVersion: "batch/v1", required: ["spec.template.spec.containers", "spec.template.spec.restartPolicy"] },
  CronJob: { apiVersion: "batch/v1", required: ["spec.schedule", "spec.jobTemplate.spec.template.spec.containers"] },
  Service: { apiVersion: "v1", required: ["spec.selector", "spec.ports"] },
  PodDisruptionBudget: { apiVersion: "policy/v1", required: ["spec.selector"] },
  NetworkPolicy: { apiVersion: "networking.k8s.io/v1", required: ["spec.podSelector"] },
  ConfigMap: { apiVersion: "v1", required: [] },
  ServiceMonitor: { apiVersion: "monitoring.coreos.com/v1", required: ["spec.selector", "spec.endpoints"] },
  PrometheusRule: { apiVersion: "monitoring.coreos.com/v1", required: ["spec.groups"] }
}

const at = (object: Json, path: string): unknown =>
  path.split(".").reduce<unknown>((value, key) => (value as Json | undefined)?.[key], object)

/** A pod's init containers, then its containers. */
const allContainers = (pod: Json): ReadonlyArray<Json> => [...(pod.initContainers ?? []), ...(pod.containers ?? [])]

/** The pod template of a workload object, if it has one. */
const podOf = (object: Json): Json | undefined =>
  (at(object, "spec.template.spec") ?? at(object, "spec.jobTemplate.spec.template.spec")) as Json | undefined

export interface Known {
  /** `crm-sync` commands (top level). */
  readonly commands: ReadonlySet<string>
  /** Environment variables crm-sync reads, and those the shipped config file names. */
  readonly env: ReadonlySet<string>
}

/**
 * What the "restricted" Pod Security Standard (kubernetes.io/docs/concepts/security/pod-security-standards)
 * and crm-sync's own rules refuse in a pod template: each container, with the pod's settings as
 * defaults where Kubernetes applies them.
 */
export const podSecurityProblems = (where: string, pod: Json): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const podContext = (pod.securityContext ?? {}) as Json
  for (const container of allContainers(pod)) {
    const context = (container.securityContext ?? {}) as Json
    const name = `${where} container ${container.name}`
    const setting = (key: string) => context[key] ?? podContext[key]
    if (setting("runAsNonRoot") !== true) problems.push(`${name}: runAsNonRoot is not true`)
    const user = setting("runAsUser")
    if (typeof user !== "number" || user === 0) problems.push(`${name}: no numeric non-root runAsUser`)
    if ((context.seccompProfile ?? podContext.seccompProfile)?.type !== "RuntimeDefault")
      problems.push(`${name}: seccompProfile is not RuntimeDefault`)
    if (context.allowPrivilegeEscalation !== false) problems.push(`${name}: allowPrivilegeEscalation is not false`)
    const dropped = (context.capabilities?.drop ?? []) as ReadonlyArray<string>
    if (!dropped.includes("ALL")) problems.push(`${name}: capabilities do not drop ALL`)
    if ((context.capabilities?.add ?? []).length > 0) problems.push(`${name}: adds capabilities`)
    if (context.readOnlyRootFilesystem !== true) problems.push(`${name}: root filesystem is writable`)
    if (container.imagePullPolicy === undefined) problems.push(`${name}: no imagePullPolicy`)
    if (typeof container.image === "string" && /:latest$|^[^:]+$/.test(container.image))
      problems.push(`${name}: image ${container.image} has no version tag`)
  }
  return problems
}

/** What is wrong with the Kubernetes manifests in `text` (several YAML documents). */
export const kubernetesProblems = (text: string, known: Known): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const objects = parseAllDocuments(text).map((document) => {
    if (document.errors.length > 0) problems.push(`YAML: ${document.errors[0]!.message}`)
    return document.toJS() as Json
  })
  const podPorts = new Map<string, number>()
  for (const object of objects) {
    const name = `${object.kind}/${object.metadata?.name ?? "(no name)"}`
    const shape = shapes[object.kind]
    if (shape === undefined) {
      problems.push(`${name}: a kind this check does not know`)
      continue
    }
    if (object.apiVersion !== shape.apiVersion)
      problems.push(`${name}: apiVersion ${object.apiVersion}, expected ${shape.apiVersion}`)
    if (typeof object.metadata?.name !== "string") problems.push(`${name}: no metadata.name`)
    for (const field of shape.required) if (at(object, field) === undefined) problems.push(`${name}: no ${field}`)
    const pod = podOf(object)
    if (pod !== undefined) problems.push(...podSecurityProblems(name, pod))
    if (object.kind === "Job" && typeof object.spec?.ttlSecondsAfterFinished !== "number")
      problems.push(`${name}: no ttlSecondsAfterFinished (it could not be applied again)`)
    for (const container of pod === undefined ? [] : allContainers(pod)) {
      const where = `${name} container ${container.name}`
      const command = (container.args as ReadonlyArray<string> | undefined)?.[0]
      if (command === undefined || !known.commands.has(command))
        problems.push(`${where}: runs "${command}", not a crm-sync command`)
      problems.push(...entrypointProblems(where, container))
      const env = new Map<string, string>()
      for (const variable of (container.env ?? []) as ReadonlyArray<Json>) {
        env.set(variable.name, String(variable.value ?? ""))
        if (!known.env.has(variable.name))
          problems.push(`${where}: sets ${variable.name}, which crm-sync does not read`)
      }
      const ports = new Map<string, number>()
      for (const port of (container.ports ?? []) as ReadonlyArray<Json>) {
        ports.set(port.name, port.containerPort)
        podPorts.set(port.name, port.containerPort)
      }
      // Declared ports are the ones crm-sync listens on.
      for (const [port, variable] of [
        ["webhooks", "CRM_SYNC_WEBHOOK_PORT"],
        ["admin", "CRM_SYNC_ADMIN_PORT"]
      ] as const) {
        const value = env.get(variable) ?? env.get(variable.replace("CRM_SYNC_", ""))
        if (ports.has(port) && value !== undefined && String(ports.get(port)) !== value)
          problems.push(`${where}: port ${port} is ${ports.get(port)}, ${variable} ${value}`)
      }
      for (const probe of ["livenessProbe", "readinessProbe"]) {
        const port = at(container, `${probe}.httpGet.port`)
        if (port !== undefined && typeof port === "string" && !ports.has(port))
          problems.push(`${where}: ${probe} on unknown port ${port}`)
      }
    }
  }
  // Services and policies name ports the pods declare.
  for (const object of objects) {
    const name = `${object.kind}/${object.metadata?.name}`
    if (object.kind === "Service") {
      for (const port of (object.spec?.ports ?? []) as ReadonlyArray<Json>) {
        if (typeof port.targetPort === "string" && !podPorts.has(port.targetPort))
          problems.push(`${name}: targetPort ${port.targetPort} is no pod port`)
      }
    }
    if (object.kind === "NetworkPolicy") {
      for (const rule of (object.spec?.ingress ?? []) as ReadonlyArray<Json>) {
        for (const port of (rule.ports ?? []) as ReadonlyArray<Json>) {
          if (typeof port.port === "string" && !podPorts.has(port.port))
            problems.push(`${name}: port ${port.port} is no pod port`)
        }
        // Only the webhook port may be open to anything outside the namespace.
        if (rule.from === undefined && (rule.ports ?? []).some((port: Json) => port.port !== "webhooks")) {
          problems.push(`${name}: a port other than webhooks is open to every source`)
        }
      }
    }
  }
  return problems
}

/** What is wrong with the compose file: commands, environment, published ports. */
export const composeProblems = (text: string, known: Known): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const compose = parseAllDocuments(text)[0]!.toJS() as Json
  const service = compose.services?.["crm-sync"] as Json | undefined
  if (service === undefined) return ["compose: no crm-sync service"]
  const command = (service.command as ReadonlyArray<string> | undefined)?.[0]
  if (command === undefined || !known.commands.has(command))
    problems.push(`compose: runs "${command}", not a crm-sync command`)
  const env = (service.environment ?? {}) as Record<string, string>
  for (const name of Object.keys(env)) {
    if (!known.env.has(name)) problems.push(`compose: sets ${name}, which crm-sync does not read`)
  }
  const published = ((service.ports ?? []) as ReadonlyArray<string>).map((port) => port.split(":").at(-1))
  for (const [variable, value] of [
    ["CRM_SYNC_WEBHOOK_PORT", env.CRM_SYNC_WEBHOOK_PORT ?? env.WEBHOOK_PORT],
    ["CRM_SYNC_ADMIN_PORT", env.CRM_SYNC_ADMIN_PORT ?? env.ADMIN_PORT]
  ] as const) {
    if (value !== undefined && !published.includes(String(value)))
      problems.push(`compose: ${variable} ${value} is not published`)
  }
  return problems
}

/**
 * A container that replaces the image's entry point must still start Node with the V8 flags its
 * command needs (bin/v8-flags.js): otherwise bin/crm-sync.js re-executes Node, two processes for one.
 */
const entrypointProblems = (where: string, container: Json): Array<string> => {
  const entrypoint = container.command as ReadonlyArray<string> | undefined
  if (entrypoint === undefined) return []
  const args = (container.args ?? []) as ReadonlyArray<string>
  const expected = ["node", ...v8FlagsFor(args), "bin/crm-sync.js"]
  return entrypoint.join(" ") === expected.join(" ")
    ? []
    : [`${where}: command ${JSON.stringify(entrypoint)}, expected ${JSON.stringify(expected)}`]
}

/** Every object of the manifests in `text`, as JavaScript. */
export const manifestObjects = (text: string): ReadonlyArray<Json> =>
  parseAllDocuments(text).map((document) => document.toJS() as Json)

/** The containers (init containers first) of the workload `kind`/`name`, as Kubernetes runs them. */
export const containersOf = (
  objects: ReadonlyArray<Json>,
  kind: string,
  name: string
): { readonly init: ReadonlyArray<Json>; readonly main: ReadonlyArray<Json> } => {
  const object = objects.find((candidate) => candidate.kind === kind && candidate.metadata?.name === name)
  const pod = object === undefined ? undefined : podOf(object)
  return {
    init: (pod?.initContainers ?? []) as ReadonlyArray<Json>,
    main: (pod?.containers ?? []) as ReadonlyArray<Json>
  }
}

/**
 * The environment Kubernetes gives `container`: every key of each `envFrom` Secret, then `env`
 * (which wins), its `secretKeyRef`s read from `secrets` (Secret name to its keys and values).
 */
export const containerEnv = (
  container: Json,
  secrets: Readonly<Record<string, Readonly<Record<string, string>>>>
): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const source of (container.envFrom ?? []) as ReadonlyArray<Json>) {
    const secret = secrets[source.secretRef?.name]
    if (secret === undefined) throw new Error(`no Secret ${source.secretRef?.name}`)
    Object.assign(env, secret)
  }
  for (const variable of (container.env ?? []) as ReadonlyArray<Json>) {
    const ref = variable.valueFrom?.secretKeyRef as Json | undefined
    if (ref === undefined) {
      env[variable.name] = String(variable.value ?? "")
      continue
    }
    const value = secrets[ref.name]?.[ref.key]
    if (value === undefined) throw new Error(`no key ${ref.key} in Secret ${ref.name}`)
    env[variable.name] = value
  }
  return env
}

const urlOf = (container: Json): Json | undefined =>
  ((container.env ?? []) as ReadonlyArray<Json>).find((variable) => variable.name === "CRM_SYNC_DATABASE_URL")

/**
 * What keeps the manifests in `text` off the least-privilege path of ops/sql/roles.sql: the
 * migrations run in their own step (a container running `migrate`) with the owner's
 * CRM_SYNC_DATABASE_URL from a Secret key of its own; every other container runs with
 * CRM_SYNC_MIGRATIONS=check and sees nothing of that Secret (it gets the runtime role's URL).
 */
export const leastPrivilegeProblems = (text: string): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const containers = manifestObjects(text).flatMap((object) => {
    const pod = podOf(object)
    return pod === undefined
      ? []
      : allContainers(pod).map((container) => ({
          where: `${object.kind}/${object.metadata?.name} container ${container.name}`,
          container
        }))
  })
  const migrators = containers.filter(({ container }) => container.args?.[0] === "migrate")
  if (migrators.length === 0) problems.push("no step runs `crm-sync migrate`: migrations have no step of their own")
  const ownerSecrets = new Set<string>()
  for (const { where, container } of migrators) {
    const secret = urlOf(container)?.valueFrom?.secretKeyRef?.name
    if (typeof secret === "string") ownerSecrets.add(secret)
    else problems.push(`${where}: CRM_SYNC_DATABASE_URL does not come from a Secret key of its own (the owner's URL)`)
  }
  for (const { where, container } of containers) {
    if (container.args?.[0] === "migrate") continue
    const migrations = ((container.env ?? []) as ReadonlyArray<Json>).find(
      (variable) => variable.name === "CRM_SYNC_MIGRATIONS"
    )
    if (migrations?.value !== "check") problems.push(`${where}: CRM_SYNC_MIGRATIONS is not check`)
    const seen = [
      ...((container.envFrom ?? []) as ReadonlyArray<Json>).map((source) => source.secretRef?.name),
      ...((container.env ?? []) as ReadonlyArray<Json>).map((variable) => variable.valueFrom?.secretKeyRef?.name)
    ]
    if (seen.some((name) => ownerSecrets.has(name))) problems.push(`${where}: sees the migration owner's Secret`)
  }
  return problems
}
