/** A labelled "Days" box for the API's 1..30-day windows; a value outside them is not taken. */
export function DaysInput({ id, days, onDays }: { id: string; days: number; onDays: (days: number) => void }) {
  return (
    <span class="pair">
      <label class="inline" for={id}>Days</label>
      <input id={id} type="number" min={1} max={30} value={days}
        onChange={(event) => {
          const value = Number((event.target as HTMLInputElement).value);
          if (Number.isInteger(value) && value >= 1 && value <= 30) onDays(value);
        }} />
    </span>
  );
}
