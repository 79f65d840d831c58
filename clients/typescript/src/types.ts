// What callers pass in and get back: plain objects, Dates for times, numbers for counts.
import type { Change, ChangeKind } from "./gen/memmachine/v2/change_service_pb.js";
import type { Episode, MemoryType, ScoreParts, SemanticFeature } from "./gen/memmachine/v2/common_pb.js";
import type { RankedMemory } from "./gen/memmachine/v2/memory_service_pb.js";

export type { Change, ChangeKind, Episode, MemoryType, RankedMemory, ScoreParts, SemanticFeature };

export interface MemoryOptions {
  /** e.g. "http://127.0.0.1:8081" (the server's gRPC port; it answers gRPC-Web too). */
  baseUrl: string;
  org: string;
  project: string;
  /** Sent as `authorization: Bearer KEY` (servers run with --auth). */
  apiKey?: string;
  /** "grpc" (HTTP/2, Node only: import from "@memmachine/client/node") or "grpc-web". */
  transport?: "grpc" | "grpc-web";
  /** Deadline of each call, retries included (default 30,000; 0: none). Not for watch. */
  timeoutMs?: number;
  /** Further attempts of a safe call after a transient failure (default 3). */
  retries?: number;
}

export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface MessageInput {
  content: string;
  /** Who said it; the server defaults to "user". */
  producer?: string;
  producedFor?: string;
  role?: string;
  timestamp?: Date;
  expiresAt?: Date;
  metadata?: Record<string, string>;
  /** Makes a retried add safe; the client makes one (a UUID) when absent. */
  idempotencyKey?: string;
}

export interface AddOptions extends CallOptions {
  types?: MemoryType[];
}

export interface AddResult {
  uid: string;
  /** The idempotency key was already stored: nothing new was stored, uid is the original's. */
  duplicate: boolean;
  idempotencyKey: string;
}

export interface SearchOptions extends CallOptions {
  topK?: number;
  filter?: string;
  types?: MemoryType[];
  expandContext?: number;
  scoreThreshold?: number;
  setMetadata?: Record<string, string>;
  asOf?: Date;
  rankTogether?: boolean;
  semanticWeight?: number;
  /** Fill `scoreParts` of each hit. */
  explain?: boolean;
}

export interface Hit {
  uid: string;
  content: string;
  score: number;
  producer: string;
  role: string;
  producedFor: string;
  createdAt: Date | undefined;
  metadata: Record<string, string>;
  /** What the score is made of (with `explain`). */
  scoreParts: ScoreParts | undefined;
  episode: Episode;
}

export interface SearchResult {
  /** Long-term hits, best first. */
  hits: Hit[];
  /** The project's most recent episodes, oldest first. */
  shortTerm: Episode[];
  summaries: string[];
  features: SemanticFeature[];
  /** With rankTogether: episodes and features in one ranking. */
  ranked: RankedMemory[];
}

export interface ListOptions extends CallOptions {
  /** Episodic (default) or semantic. */
  type?: MemoryType;
  pageSize?: number;
  filter?: string;
  setMetadata?: Record<string, string>;
  asOf?: Date;
  /** Start from this page token. */
  pageToken?: string;
}

export interface ListPage {
  episodes: Episode[];
  features: SemanticFeature[];
  /** Empty on the last page. */
  nextPageToken: string;
}

export interface DeleteOptions extends CallOptions {
  /** Episodic (default: ids are episode uids) or semantic (feature ids). */
  type?: MemoryType;
}

export interface ForgetOptions extends CallOptions {
  /** Projects of the org to forget in: default this client's project; "all": every one. */
  projects?: string[] | "all";
  /** Count only; nothing is removed and no receipt kept. */
  dryRun?: boolean;
}

export interface ForgetReceipt {
  receiptId: string;
  subject: string;
  dryRun: boolean;
  completedAt: Date | undefined;
  projects: {
    projectId: string;
    episodesDeleted: number;
    featuresDeleted: number;
    citationsRemoved: number;
    summariesDeleted: number;
    setsDeleted: number;
  }[];
}

export interface FeaturesOptions extends CallOptions {
  /** With a query: SearchFeatures (ranked, topK); without: every feature, listed. */
  query?: string;
  topK?: number;
  filter?: string;
  scoreThreshold?: number;
  setMetadata?: Record<string, string>;
  asOf?: Date;
}

/** Where watch keeps the cursor of the last change processed. */
export interface CursorStore {
  load(): Promise<string | undefined>;
  save(cursor: string): Promise<void>;
}

export interface WatchOptions {
  /** Resume after this cursor (else the store's; else from now on). */
  after?: string;
  store?: CursorStore;
  /** Ends the iteration. */
  signal?: AbortSignal;
  /** Longest wait between reconnects (default 2,000 ms). */
  maxBackoffMs?: number;
  /** Called before each reconnect, with the error that ended the stream (if any). */
  onReconnect?: (error: Error | undefined, attempt: number) => void;
}

export interface ImportOptions {
  types?: MemoryType[];
  signal?: AbortSignal;
  /** Overall deadline (default none: an import may be long). */
  timeoutMs?: number;
}

export interface ImportResult {
  batches: number;
  messages: number;
  duplicates: number;
  /** The first batch that was not stored (the import stopped there). */
  firstError: { batch: number; code: number; message: string } | undefined;
}
