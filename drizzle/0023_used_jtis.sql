CREATE TABLE "used_jtis" (
	"namespace" text NOT NULL,
	"jti" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "used_jtis_namespace_jti_pk" PRIMARY KEY("namespace","jti")
);
--> statement-breakpoint
CREATE INDEX "used_jtis_expires_at_idx" ON "used_jtis" USING btree ("expires_at");