import { useEffect, useRef, useState } from 'preact/hooks';
import { api, MEMBER_ROLES, type Member, type MemberRole } from '../api.js';
import { mayDo } from '../session.js';
import { utcTime } from './requests.js';
import { TableWrap } from './table-wrap.js';
import { Confirm, Outcome, useResource } from './use-resource.js';

/** The route's bound on an email (docs/governance.md "Members"). */
const EMAIL_MAX_LENGTH = 320;

/** How the page names a member: their email, else the identity provider's subject. */
export const memberName = (member: Member) => member.email ?? member.subject ?? member.id;

const sessionsEnded = (count: number) => (count === 0 ? '' : count === 1 ? ' 1 session of theirs ended.' : ` ${count} sessions of theirs ended.`);

/**
 * The account's members and invitations (docs/governance.md "Members"): who, role, joined or invited;
 * invite by email with a role, change a role, remove after a confirmation. The auth service judges who
 * may change whom (an admin grants no owner; the last owner stays); its refusals are shown in its words.
 */
export function MembersView() {
  const allowed = mayDo('members.read');
  const mayWrite = mayDo('members.write');
  const { data, error, notice, reload, act } = useResource(() => (allowed ? api.members() : Promise.resolve(undefined)), [allowed]);
  const [editing, setEditing] = useState<Member>();
  const [removing, setRemoving] = useState<Member>();
  const [forms, setForms] = useState(0);

  const members = data?.data;

  return (
    <>
      <div class="row">
        <h1>Members</h1>
        {allowed && <button type="button" class="secondary" onClick={reload}>Refresh</button>}
      </div>
      {!allowed && <p role="status" class="card">Your role may not see the members; the account's owners and admins may.</p>}
      <Outcome error={error} notice={notice} />
      {removing && (
        <Confirm key={removing.id} titleId="remove-member-title" action="Remove member" onCancel={() => setRemoving(undefined)} onConfirm={() => {
          const target = removing;
          setRemoving(undefined);
          void act(() => api.removeMember(target.id), (answer) => `Removed ${memberName(target)}.${sessionsEnded(answer.sessions_revoked)}`);
        }}>Remove <strong>{memberName(removing)}</strong> ({removing.role}) from the account? Their sessions of this account end at once.</Confirm>
      )}
      {editing && (
        <ChangeRole key={editing.id} member={editing} onCancel={() => setEditing(undefined)}
          onSave={(role) => {
            const target = editing;
            setEditing(undefined);
            void act(() => api.updateMember(target.id, role), (answer) => `${memberName(target)} is now ${answer.role}.${sessionsEnded(answer.sessions_revoked)}`);
          }} />
      )}
      {allowed && (
        <section aria-labelledby="members-title" class="card">
          <h2 id="members-title">Members and invitations</h2>
          <p class="hint">People let in beyond the identity provider's groups. An invitation binds at the person's first sign-in with that email, once the provider has verified it.</p>
          <TableWrap label="Members table">
            <table aria-label="Members">
              <thead>
                <tr><th scope="col">Member</th><th scope="col">Role</th><th scope="col">Status</th><th scope="col">Joined or invited</th><th scope="col">Actions</th></tr>
              </thead>
              <tbody>
                {(members ?? []).map((member) => (
                  <tr key={member.id}>
                    <td>{member.email ?? <code class="id">{member.subject}</code>}{member.issuer && <><br /><span class="hint">{member.issuer}</span></>}</td>
                    <td>{member.role}</td>
                    <td>{member.status}</td>
                    <td class="time">{member.joined_at !== null ? `joined ${utcTime(member.joined_at)}` : `invited ${utcTime(member.created_at)}`}</td>
                    <td><div class="actions">
                      {mayWrite ? <>
                        <button type="button" class="secondary" aria-label={`Change role of ${memberName(member)}`} onClick={() => setEditing(member)}>Change role</button>
                        <button type="button" class="danger" aria-label={`Remove ${memberName(member)}`} onClick={() => setRemoving(member)}>Remove</button>
                      </> : 'read only'}
                    </div></td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableWrap>
          {members?.length === 0 && <p>No members yet: the identity provider's groups and the provisioning key reach this account.</p>}
        </section>
      )}
      {mayWrite && (
        // A new form (its fields cleared) after an invitation the route took; a refused one keeps what was typed.
        <Invite key={forms} onInvite={async (email, role) => {
          if (await act(() => api.inviteMember(email, role), (answer) => `Invited ${answer.email ?? email} as ${answer.role}.`)) setForms((count) => count + 1);
        }} />
      )}
    </>
  );
}

function RoleSelect({ id, value, onChange }: { id: string; value: MemberRole; onChange: (role: MemberRole) => void }) {
  return (
    <select id={id} value={value} onChange={(event) => onChange((event.target as HTMLSelectElement).value as MemberRole)}>
      {MEMBER_ROLES.map((role) => <option key={role} value={role}>{role}</option>)}
    </select>
  );
}

const RULES = 'Only an owner grants the owner role or changes or removes an owner; the last owner can be neither demoted nor removed. A lowered role ends the person\'s sessions of this account at once; a raised one applies at their next sign-in.';

function Invite({ onInvite }: { onInvite: (email: string, role: MemberRole) => Promise<void> }) {
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<MemberRole>('viewer');
  return (
    <section aria-labelledby="invite-title" class="card">
      <h2 id="invite-title">Invite by email</h2>
      <form class="grid" onSubmit={(event) => { event.preventDefault(); void onInvite(email.trim(), role); }}>
        <label>Email<input type="email" value={email} required maxLength={EMAIL_MAX_LENGTH} autocomplete="off" spellcheck={false}
          onInput={(event) => setEmail((event.target as HTMLInputElement).value)} /></label>
        <label>Role<RoleSelect id="invite-role" value={role} onChange={setRole} /></label>
        <div><button type="submit">Invite</button></div>
      </form>
      <p class="hint">No email is sent: tell the person to sign in with the identity provider. {RULES}</p>
    </section>
  );
}

function ChangeRole({ member, onSave, onCancel }: { member: Member; onSave: (role: MemberRole) => void; onCancel: () => void }) {
  const [role, setRole] = useState<MemberRole>((MEMBER_ROLES as readonly string[]).includes(member.role) ? (member.role as MemberRole) : 'viewer');
  const section = useRef<HTMLElement>(null);
  useEffect(() => { section.current?.querySelector('select')?.focus(); }, [member.id]);
  return (
    <section aria-labelledby="change-role-title" class="card notice" ref={section}>
      <h2 id="change-role-title">Change the role of {memberName(member)}</h2>
      <form class="grid" onSubmit={(event) => { event.preventDefault(); onSave(role); }}>
        <label>New role<RoleSelect id="change-role" value={role} onChange={setRole} /></label>
        <div><button type="submit">Save role</button>{' '}<button type="button" class="secondary" onClick={onCancel}>Cancel</button></div>
      </form>
      <p class="hint">Now {member.role}. {RULES}</p>
    </section>
  );
}
