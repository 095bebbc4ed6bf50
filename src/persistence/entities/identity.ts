import { defineEntity, p } from '@mikro-orm/core';

/**
 * Identity tables (migration Migration20261122000100_identity). The identity store mostly talks SQL
 * (joins, conditional updates with RETURNING); these definitions keep the ORM aware of the schema and
 * serve the simple em.nativeUpdate / em.count calls.
 */
export const User = defineEntity({
  name: 'User',
  tableName: 'users',
  properties: {
    id: p.uuid().primary(),
    emailAddress: p.text(),
    emailNormalized: p.text().unique(),
    passwordHash: p.text(),
    firstName: p.text(),
    lastName: p.text(),
    displayName: p.text(),
    emailVerifiedAt: p.datetime().nullable(),
    sessionVersion: p.integer(),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p.datetime().onCreate(() => new Date()),
  },
});

export const Team = defineEntity({
  name: 'Team',
  tableName: 'teams',
  properties: {
    id: p.uuid().primary(),
    displayName: p.text(),
    ownerId: p.uuid(),
    isPersonal: p.boolean(),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p.datetime().onCreate(() => new Date()),
    deletedAt: p.datetime().nullable(),
  },
});

export const TeamMember = defineEntity({
  name: 'TeamMember',
  tableName: 'team_members',
  properties: {
    teamId: p.uuid().primary(),
    userId: p.uuid().primary(),
    memberRole: p.text(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});

export const Invitation = defineEntity({
  name: 'Invitation',
  tableName: 'invitations',
  properties: {
    id: p.uuid().primary(),
    teamId: p.uuid(),
    emailAddress: p.text(),
    emailNormalized: p.text(),
    memberRole: p.text(),
    tokenHash: p.text().unique(),
    invitedBy: p.uuid().nullable(),
    invitationStatus: p.text(),
    expiresAt: p.datetime(),
    acceptedBy: p.uuid().nullable(),
    acceptedAt: p.datetime().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});

export const RefreshToken = defineEntity({
  name: 'RefreshToken',
  tableName: 'refresh_tokens',
  properties: {
    id: p.uuid().primary(),
    familyId: p.uuid(),
    userId: p.uuid(),
    tokenHash: p.text().unique(),
    createdAt: p.datetime().onCreate(() => new Date()),
    expiresAt: p.datetime(),
    rotatedAt: p.datetime().nullable(),
    revokedAt: p.datetime().nullable(),
  },
});

export const Credential = defineEntity({
  name: 'Credential',
  tableName: 'credentials',
  properties: {
    id: p.uuid().primary(),
    credentialType: p.text(),
    teamId: p.uuid(),
    userId: p.uuid().nullable(),
    displayName: p.text(),
    credentialPrefix: p.text(),
    secretHash: p.text().unique(),
    linkedTo: p.uuid().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
    expiresAt: p.datetime().nullable(),
    revokedAt: p.datetime().nullable(),
    lastUsedAt: p.datetime().nullable(),
  },
});

export const DevicePairing = defineEntity({
  name: 'DevicePairing',
  tableName: 'device_pairings',
  properties: {
    id: p.uuid().primary(),
    userCode: p.text(),
    pollSecretHash: p.text(),
    deviceName: p.text(),
    pairingStatus: p.text(),
    userId: p.uuid().nullable(),
    teamId: p.uuid().nullable(),
    expiresAt: p.datetime(),
    lastPolledAt: p.datetime().nullable(),
    confirmedAt: p.datetime().nullable(),
    deliveredAt: p.datetime().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});

export const OneTimeToken = defineEntity({
  name: 'OneTimeToken',
  tableName: 'one_time_tokens',
  properties: {
    id: p.uuid().primary(),
    tokenType: p.text(),
    userId: p.uuid(),
    tokenHash: p.text().unique(),
    expiresAt: p.datetime(),
    usedAt: p.datetime().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});

export const EmailOutbox = defineEntity({
  name: 'EmailOutbox',
  tableName: 'email_outbox',
  properties: {
    id: p.uuid().primary(),
    emailKind: p.text(),
    toAddress: p.text(),
    subject: p.text(),
    bodyText: p.text(),
    createdAt: p.datetime().onCreate(() => new Date()),
    nextAttemptAt: p.datetime(),
    attempts: p.integer(),
    sentAt: p.datetime().nullable(),
    lastError: p.text().nullable(),
  },
});

export const identityEntities = [User, Team, TeamMember, Invitation, RefreshToken, Credential, DevicePairing, OneTimeToken, EmailOutbox];
