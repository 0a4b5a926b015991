import { describe, expect, it } from 'vitest';
import { ACCOUNT_ROLES, ACTIONS, actionsOf, isAccountRole, isRole, ROLE_ACTIONS, ROLES, roleMay, strongerAccountRole } from './roles.js';

// The table's shape, as docs/governance.md "Sign-in and roles" states it; the e2e test
// (apps/standalone/test/roles-matrix.e2e.test.ts) checks every route against every cell.
describe('role × action table', () => {
  const writes = ACTIONS.filter((action) => action.endsWith('.write'));
  const adminActions = ACTIONS.filter((action) => action.startsWith('admin.'));

  it('keeps the operator and the account roles apart: no account role reaches an admin action, the operator no account action', () => {
    for (const role of ACCOUNT_ROLES) for (const action of adminActions) expect(roleMay(role, action), `${role} ${action}`).toBe(false);
    for (const action of ACTIONS) expect(roleMay('operator', action), action).toBe(action.startsWith('admin.'));
  });

  it('lets billing and viewer change nothing, and owner and admin every account action', () => {
    for (const role of ['billing', 'viewer'] as const) for (const action of writes) expect(roleMay(role, action), `${role} ${action}`).toBe(false);
    for (const role of ['owner', 'admin'] as const) for (const action of ACTIONS.filter((each) => !each.startsWith('admin.'))) expect(roleMay(role, action)).toBe(true);
  });

  it('names only known roles and actions, and lists actions in the table\'s order', () => {
    expect(Object.keys(ROLE_ACTIONS).sort()).toEqual([...ROLES].sort());
    for (const role of ROLES) for (const action of ROLE_ACTIONS[role]) expect(ACTIONS).toContain(action);
    expect(actionsOf('viewer')).toEqual(['balance.read', 'activity.read', 'generations.read', 'keys.read', 'budgets.read']);
    // The audit log (before/after of every change) is for the roles that make changes.
    expect(['owner', 'admin', 'billing', 'viewer'].map((role) => roleMay(role as 'owner', 'audit.read'))).toEqual([true, true, false, false]);
    // Webhook endpoints: billing follows the alerts' delivery; the viewer does not see receivers' URLs.
    expect(['owner', 'admin', 'billing', 'viewer'].map((role) => roleMay(role as 'owner', 'webhooks.read'))).toEqual([true, true, true, false]);
    expect(['owner', 'admin', 'billing', 'viewer'].map((role) => roleMay(role as 'owner', 'webhooks.write'))).toEqual([true, true, false, false]);
    // Members name people: only the roles that administer the account see or change them.
    for (const action of ['members.read', 'members.write'] as const) {
      expect(['owner', 'admin', 'billing', 'viewer'].map((role) => roleMay(role as 'owner', action)), action).toEqual([true, true, false, false]);
    }
    expect(isRole('operator') && !isAccountRole('operator') && isAccountRole('owner') && !isRole('root') && !isRole('Owner')).toBe(true);
  });
});

describe('strongerAccountRole', () => {
  it('picks the stronger of two account roles whatever the order', () => {
    for (const a of ACCOUNT_ROLES) {
      for (const b of ACCOUNT_ROLES) {
        const expected = ACCOUNT_ROLES.indexOf(a) <= ACCOUNT_ROLES.indexOf(b) ? a : b;
        expect(strongerAccountRole(a, b)).toBe(expected);
        expect(strongerAccountRole(b, a)).toBe(expected);
      }
    }
    expect(strongerAccountRole('viewer', 'owner')).toBe('owner');
  });
});
