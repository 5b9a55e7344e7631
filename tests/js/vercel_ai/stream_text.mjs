// The Vercel AI SDK, unchanged, against chatd's Open Responses endpoint: `streamText` with one
// tool and up to five steps, through the SDK's Responses provider. Prints one JSON line.
// Env: CHATD_BASE_URL (http://HOST:PORT/v1), CHATD_API_KEY, CHATD_MODEL.
import { createOpenAI } from "@ai-sdk/openai";
import { stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({
  baseURL: process.env.CHATD_BASE_URL,
  apiKey: process.env.CHATD_API_KEY,
});

const errors = [];
const result = streamText({
  model: openai.responses(process.env.CHATD_MODEL),
  system: "You are a helpful assistant.",
  prompt: "What is the weather in Paris?",
  tools: {
    get_weather: tool({
      description: "Get the weather for a city",
      inputSchema: z.object({ city: z.string().describe("City name") }),
      execute: async ({ city }) => ({ city, forecast: "sunny" }),
    }),
  },
  stopWhen: stepCountIs(5),
  onError: ({ error }) => errors.push(String(error?.message ?? error)),
});

let deltas = "";
for await (const part of result.fullStream) {
  if (part.type === "text-delta") deltas += part.text;
  if (part.type === "error") errors.push(String(part.error?.message ?? part.error));
}
const steps = await result.steps;
console.log(
  JSON.stringify({
    text: await result.text,
    deltas,
    finishReason: await result.finishReason,
    toolResults: steps.flatMap((step) => step.toolResults.map((r) => r.output)),
    responseIds: steps.map((step) => step.response?.id),
    errors,
  }),
);
