// The Vercel AI SDK, unchanged, asking chatd's Open Responses endpoint for an object that
// fits a zod schema: `generateObject`, and `generateText` with `Output.object` (the SDK's
// newer spelling of the same request). Prints one JSON line with both objects and the request
// bodies sent. Env: CHATD_BASE_URL (http://HOST:PORT/v1), CHATD_API_KEY, CHATD_MODEL.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, Output } from "ai";
import { z } from "zod";

const requests = [];
const chatd = createOpenAI({
  baseURL: process.env.CHATD_BASE_URL,
  apiKey: process.env.CHATD_API_KEY,
  fetch: async (url, init) => {
    if (typeof init?.body === "string") requests.push(JSON.parse(init.body));
    return fetch(url, init);
  },
});

const forecast = z.object({
  city: z.string(),
  celsius: z.number().int(),
  sunny: z.boolean(),
  hours: z.array(z.number().int()),
});

const result = { requests };
try {
  const generated = await generateObject({
    model: chatd.responses(process.env.CHATD_MODEL),
    schema: forecast,
    schemaName: "forecast",
    prompt: "The weather in Paris?",
  });
  result.object = generated.object;
  result.finishReason = generated.finishReason;
  const text = await generateText({
    model: chatd.responses(process.env.CHATD_MODEL),
    output: Output.object({ schema: forecast }),
    prompt: "The weather in Rome?",
  });
  result.output = text.output;
} catch (error) {
  result.error = String(error?.message ?? error);
}
console.log(JSON.stringify(result));
