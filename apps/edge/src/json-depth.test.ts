import { describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, fieldOfDeepPath, offsetBeyondDepth, pathAtOffset } from './json-depth.js';

/** `levels` nested objects: `{"a":{"a":...{}}}`. */
const nestedObjects = (levels: number) => `${'{"a":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`;
const nestedArrays = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;

/** The path to the first too-deep container of `text`, or undefined. */
function pathBeyond(text: string, maxDepth = MAX_JSON_DEPTH) {
  const offset = offsetBeyondDepth(text, maxDepth);
  return offset < 0 ? undefined : pathAtOffset(text, offset);
}

describe('offsetBeyondDepth / pathAtOffset (request body nesting bound)', () => {
  it('finds nothing in scalars, flat and shallow values', () => {
    for (const text of ['null', '1', '"text"', 'true', '{}', '[]', '{"a":[1,2,{"b":"c"}]}', '']) expect(pathBeyond(text)).toBeUndefined();
  });

  it('counts the outermost value as level 1: exactly the bound passes, one more level does not', () => {
    expect(pathBeyond(nestedObjects(MAX_JSON_DEPTH))).toBeUndefined();
    expect(pathBeyond(nestedArrays(MAX_JSON_DEPTH))).toBeUndefined();
    expect(pathBeyond(nestedObjects(MAX_JSON_DEPTH + 1))).toEqual(Array(MAX_JSON_DEPTH).fill('a'));
    expect(pathBeyond(nestedArrays(MAX_JSON_DEPTH + 1))).toEqual(Array(MAX_JSON_DEPTH).fill(0));
    expect(pathBeyond(nestedObjects(3), 2)).toEqual(['a', 'a']);
    expect(offsetBeyondDepth('[[[]]]', 2)).toBe(2);
  });

  it('names the path through objects and arrays, after shallow siblings, whatever the spacing', () => {
    const body = { model: 'm', messages: [{ role: 'user' }], tools: [{ type: 'function' }, { function: { parameters: JSON.parse(nestedObjects(10)) } }] };
    for (const text of [JSON.stringify(body), JSON.stringify(body, null, 2), JSON.stringify(body, null, '\t')]) {
      expect(pathBeyond(text, 8)).toEqual(['tools', 1, 'function', 'parameters', 'a', 'a', 'a', 'a']);
      expect(pathBeyond(text, 14)).toBeUndefined();
    }
  });

  it('brackets and quotes inside strings do not count; escaped keys are decoded', () => {
    const tricky = JSON.stringify({ 'k"[\\': '[[[[{{{{ \\" \\\\" ]]', list: ['[', '{', '\\', '"'], deep: [[['x']]] });
    expect(pathBeyond(tricky, 3)).toEqual(['deep', 0, 0]);
    expect(pathBeyond(tricky, 4)).toBeUndefined();
    expect(pathBeyond(JSON.stringify({ 'k"\\': [[[]]] }), 3)).toEqual(['k"\\', 0, 0]);
    expect(pathBeyond(JSON.stringify({ a: 'x\\', b: [[[]]] }), 3)).toEqual(['b', 0, 0]);
  });

  it('walks a million levels of nesting (what JSON.parse takes seconds for) without parsing them', () => {
    expect(pathBeyond(nestedArrays(1_000_000))).toHaveLength(MAX_JSON_DEPTH);
    expect(pathBeyond(`${'{"a":'.repeat(1_000_000)}`)).toHaveLength(MAX_JSON_DEPTH);
  });

  it('text that is not JSON: an unterminated string ends the scan (JSON.parse reports it)', () => {
    expect(offsetBeyondDepth(`"${'['.repeat(100)}`)).toBe(-1);
    expect(offsetBeyondDepth(`${'['.repeat(10)}"abc`, 20)).toBe(-1);
  });
});

describe('fieldOfDeepPath (which field a too-deep path is reported as)', () => {
  const freeForm = [['tools', '*', 'function', 'parameters'], ['response_format', 'json_schema', 'schema']];

  it('names the free-form field the path runs through', () => {
    expect(fieldOfDeepPath(['tools', 3, 'function', 'parameters', 'properties', 'a'], freeForm)).toEqual(['tools', 3, 'function', 'parameters']);
    expect(fieldOfDeepPath(['response_format', 'json_schema', 'schema', 'a', 'b'], freeForm)).toEqual(['response_format', 'json_schema', 'schema']);
  });

  it('an index segment matches only an array index', () => {
    expect(fieldOfDeepPath(['tools', 'x', 'function', 'parameters', 'a'], freeForm)).toEqual(['tools', 'x']);
  });

  it('else the first two segments, or as many as there are', () => {
    expect(fieldOfDeepPath(['messages', 2, 'content', 0, 'x'], freeForm)).toEqual(['messages', 2]);
    expect(fieldOfDeepPath([0, 0, 0, 0], freeForm)).toEqual([0, 0]);
    expect(fieldOfDeepPath(['extra'], freeForm)).toEqual(['extra']);
    expect(fieldOfDeepPath([], freeForm)).toEqual([]);
  });
});
